//! Scenarios: everything random about one seed, drawn up front from the seed alone, so that every
//! strategy faces the very same world.
//!
//! A [`Scenario`] is plain data with public fields: tests build one with [`Scenario::generate`]
//! (or [`Scenario::issue_6694`]) and then pin the properties they need.

use std::time::Duration;

use tier_core::{DesiredSet, DriverConfig, TierSpec};
use tier_memory::{AdmissionView, Verb};

use crate::bounds::LIVENESS_SLACK;
use crate::worlds::World;

/// The longest an initializer waits after the run starts before it starts.
pub const MAX_START: Duration = Duration::from_secs(2);
/// The longest an initializer's cache takes to complete its first list.
pub const MAX_SYNC: Duration = Duration::from_secs(5);
/// The longest any cache (an initializer's, or the webhook's) lags behind the store.
pub const MAX_LAG: Duration = Duration::from_secs(5);
/// The longest latency injected into one call.
pub const MAX_LATENCY: Duration = Duration::from_secs(1);
/// The shortest fault phase.
pub const MIN_QUIET_AT: Duration = Duration::from_secs(15);
/// The longest fault phase.
pub const MAX_QUIET_AT: Duration = Duration::from_secs(120);

/// One seed's world: the starting store, the initializers, the webhook, the faults and the
/// adversary's schedule. Times are offsets from the start of the run (virtual time).
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    /// The seed it was drawn from.
    pub seed: u64,
    /// What the store holds at the start (system Tiers as drifted as drawn, and squatters).
    pub start: Vec<TierSpec>,
    /// The initializers running at once (one to three).
    pub initializers: Vec<InitializerPlan>,
    /// The Tier webhook.
    pub webhook: WebhookPlan,
    /// The random faults on every call until `quiet_at`.
    pub faults: FaultPlan,
    /// When faults and adversaries stop and blockers (every Tier outside the desired set) are
    /// removed.
    pub quiet_at: Duration,
    /// What other actors do before `quiet_at`, in time order.
    pub adversary: Vec<AdversaryEvent>,
    /// The family the world was drawn from.
    pub world: World,
    /// Faults aimed at one Tier or one verb, on every matching call until `quiet_at`.
    pub targeted: Vec<TargetedFault>,
    /// Changes of every initializer's cache lag over time, in time order.
    pub lag_changes: Vec<LagChange>,
    /// A prune controller deletes this Tier whenever it exists, until `quiet_at`: its deletion
    /// reaches every lagging cache together with the create (nothing sees the Tier exist).
    pub pruned: Option<String>,
}

/// What a [`TargetedFault`] does to each matching call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetedEffect {
    /// 503, not applied.
    Unavailable,
    /// Never answers: the driver's call timeout cuts it.
    Hang,
    /// 403 from RBAC naming the verb's permission.
    Forbidden,
}

/// A fault on every call of one verb (for one Tier, or for all) until `quiet_at`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetedFault {
    /// The verb.
    pub verb: Verb,
    /// The Tier (`None`: every Tier, as RBAC refuses a verb).
    pub name: Option<String>,
    /// What each matching call gets.
    pub effect: TargetedEffect,
}

impl TargetedFault {
    /// Whether it hits a `verb` call for the Tier `name`.
    pub fn hits(&self, verb: Verb, name: &str) -> bool {
        self.verb == verb && self.name.as_deref().is_none_or(|n| n == name)
    }
}

/// From `at` on, every initializer's cache lags by `lag` (changes already queued keep theirs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LagChange {
    /// Offset from the start of the run.
    pub at: Duration,
    /// The new lag.
    pub lag: Duration,
}

/// One initializer: when it starts, and its cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InitializerPlan {
    /// Its client name (as recorded in the call log).
    pub name: String,
    /// When it starts (its cache is created then).
    pub start_at: Duration,
    /// How long after its start its cache completes the first list (zero: at once).
    pub sync_after: Duration,
    /// How far its cache lags behind the store.
    pub lag: Duration,
    /// The seed of its jitter.
    pub seed: u64,
}

/// The Tier webhook's behaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WebhookPlan {
    /// What its overlap check reads.
    pub view: AdmissionView,
    /// How far its cache lags (relevant with [`AdmissionView::Cache`]).
    pub lag: Duration,
    /// Until when it is unreachable (writes fail with 500), as while the controller is not Ready.
    pub unreachable_until: Duration,
}

/// The seeded random faults (see [`tier_memory::faults::RandomFaults`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FaultPlan {
    /// Probability that a call fails with a transient error and is not applied.
    pub fail: f64,
    /// Probability that a call is applied but its response is lost.
    pub lose_response: f64,
    /// Each call is delayed by up to this.
    pub max_latency: Duration,
    /// The `Retry-After` of failed calls, if any.
    pub retry_after: Option<Duration>,
    /// How many calls never answer (the first ones to come): the driver's call timeout must
    /// cut them.
    pub hangs: u32,
}

/// Something another actor does, bypassing admission as a person with enough rights (or a
/// misconfigured webhook) could.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdversaryAction {
    /// Creates a user Tier (a squatter when its priority is a desired one).
    Squat {
        /// The squatter's name (never a desired name).
        name: String,
        /// Its priority.
        priority: i64,
    },
    /// Deletes a user Tier.
    Unsquat {
        /// The squatter's name.
        name: String,
    },
    /// Deletes a system Tier.
    DeleteSystem {
        /// The system Tier's name.
        name: String,
    },
    /// Changes a system Tier's priority.
    EditPriority {
        /// The system Tier's name.
        name: String,
        /// The new priority.
        priority: i64,
    },
    /// Changes a system Tier's description.
    EditDescription {
        /// The system Tier's name.
        name: String,
        /// The new description.
        description: String,
    },
}

/// An adversary action and when it happens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdversaryEvent {
    /// Offset from the start of the run.
    pub at: Duration,
    /// What happens.
    pub action: AdversaryAction,
}

impl Scenario {
    /// Draws a scenario from `seed`. Deterministic: the same seed always gives the same world.
    pub fn generate(seed: u64) -> Self {
        let mut rng = fastrand::Rng::with_seed(seed);
        let desired = DesiredSet::antrea();
        let mut start = Vec::new();
        for want in desired.tiers() {
            let mut tier = want.clone();
            match rng.u32(0..100) {
                0..35 => {}
                35..60 => continue,
                60..75 => tier.priority = drifted_priority(&mut rng, want.priority),
                75..90 => tier.description = "edited by hand".to_owned(),
                _ => {
                    tier.priority = drifted_priority(&mut rng, want.priority);
                    tier.description = String::new();
                }
            }
            start.push(tier);
        }
        let mut squatters: Vec<String> = Vec::new();
        for _ in 0..rng.usize(0..=3) {
            let name = format!("user-{}", squatters.len());
            start.push(TierSpec::new(
                &name,
                squat_priority(&mut rng),
                "a user Tier",
            ));
            squatters.push(name);
        }

        let count = match rng.u32(0..10) {
            0..5 => 1,
            5..8 => 2,
            _ => 3,
        };
        let initializers = (0..count)
            .map(|i| InitializerPlan {
                name: format!("tierd-{i}"),
                start_at: if i == 0 {
                    Duration::ZERO
                } else {
                    millis(&mut rng, MAX_START)
                },
                sync_after: if rng.u32(0..10) < 4 {
                    Duration::ZERO
                } else {
                    millis(&mut rng, MAX_SYNC)
                },
                lag: if rng.u32(0..10) < 3 {
                    Duration::ZERO
                } else {
                    millis(&mut rng, MAX_LAG)
                },
                seed: rng.u64(..),
            })
            .collect();

        let webhook = WebhookPlan {
            view: if rng.u32(0..10) < 7 {
                AdmissionView::Store
            } else {
                AdmissionView::Cache
            },
            lag: millis(&mut rng, MAX_LAG),
            unreachable_until: if rng.u32(0..10) < 3 {
                millis(&mut rng, Duration::from_secs(20))
            } else {
                Duration::ZERO
            },
        };
        let faults = FaultPlan {
            fail: rng.f64() * 0.3,
            lose_response: rng.f64() * 0.15,
            max_latency: millis(&mut rng, MAX_LATENCY),
            retry_after: (rng.u32(0..10) < 2)
                .then(|| Duration::from_millis(rng.u64(1_000..=5_000))),
            hangs: if rng.u32(0..10) < 2 {
                rng.u32(1..=3)
            } else {
                0
            },
        };
        let quiet_at =
            Duration::from_millis(rng.u64(as_millis(MIN_QUIET_AT)..=as_millis(MAX_QUIET_AT)));

        let mut adversary = Vec::new();
        if rng.bool() {
            let mut times: Vec<u64> = (0..rng.usize(1..=15))
                .map(|_| rng.u64(0..as_millis(quiet_at)))
                .collect();
            times.sort_unstable();
            for at in times {
                let action = adversary_action(&mut rng, &desired, &mut squatters);
                adversary.push(AdversaryEvent {
                    at: Duration::from_millis(at),
                    action,
                });
            }
            if rng.u32(0..4) == 0 {
                adversary.extend(contest_edits(&mut rng, &desired, quiet_at));
                adversary.sort_by_key(|e| e.at);
            }
        }

        Self {
            seed,
            start,
            initializers,
            webhook,
            faults,
            quiet_at,
            adversary,
            world: World::Random,
            targeted: Vec::new(),
            lag_changes: Vec::new(),
            pruned: None,
        }
    }

    /// Draws a scenario of `world` from `seed` (see [`World`]); [`World::Random`] is
    /// [`generate`](Self::generate).
    pub fn generate_in(world: World, seed: u64) -> Self {
        crate::worlds::generate(world, seed)
    }

    /// The world of Antrea issue 6694, without any fault: all six system Tiers exist exactly as
    /// desired, and one initializer starts while its cache has not completed its first list
    /// (it syncs 2 s later).
    pub fn issue_6694() -> Self {
        Self {
            seed: 6694,
            start: DesiredSet::antrea().tiers().to_vec(),
            initializers: vec![InitializerPlan {
                name: "tierd-0".to_owned(),
                start_at: Duration::ZERO,
                sync_after: Duration::from_secs(2),
                lag: Duration::ZERO,
                seed: 6694,
            }],
            webhook: WebhookPlan {
                view: AdmissionView::Store,
                lag: Duration::ZERO,
                unreachable_until: Duration::ZERO,
            },
            faults: FaultPlan {
                fail: 0.0,
                lose_response: 0.0,
                max_latency: Duration::ZERO,
                retry_after: None,
                hangs: 0,
            },
            quiet_at: MIN_QUIET_AT,
            adversary: Vec::new(),
            world: World::Random,
            targeted: Vec::new(),
            lag_changes: Vec::new(),
            pruned: None,
        }
    }

    /// The longest any cache that matters lags: every initializer's, and the webhook's when it
    /// reads its cache.
    pub fn max_lag(&self) -> Duration {
        let webhook = match self.webhook.view {
            AdmissionView::Cache => self.webhook.lag,
            AdmissionView::Store => Duration::ZERO,
        };
        self.initializers
            .iter()
            .map(|i| i.lag)
            .chain(self.lag_changes.iter().map(|c| c.lag))
            .fold(webhook, Duration::max)
    }

    /// From when the world allows a `verb` of the Tier `name` to succeed, for the liveness
    /// invariant (see [`crate::bounds`]): at `quiet_at` in the random worlds (random faults hit
    /// every call until then) and for a Tier or verb a fault is aimed at, or that is pruned; else
    /// once the first initializer's cache has synced. (Another Tier on its priority is the
    /// store's business: the liveness check reads it there.)
    pub fn allowed_from(&self, verb: Verb, name: &str) -> Duration {
        let faulted = self.world == World::Random
            || self.targeted.iter().any(|f| f.hits(verb, name))
            || (verb == Verb::Create && self.pruned.as_deref() == Some(name));
        if faulted {
            return self.quiet_at;
        }
        self.initializers
            .iter()
            .map(|i| i.start_at.saturating_add(i.sync_after))
            .min()
            .unwrap_or(self.quiet_at)
    }

    /// How long after the world allows it a Tier must be in sync in the store (see
    /// [`crate::bounds`]): like [`convergence_bound`](Self::convergence_bound) but without the
    /// contest hold-off (a Tier nobody fights over is never held off) and with
    /// [`LIVENESS_SLACK`]. A Tier in a fight gets [`ContestPolicy::hold_cap`] more, from the
    /// fight's last change.
    ///
    /// [`ContestPolicy::hold_cap`]: tier_core::ContestPolicy::hold_cap
    pub fn liveness_bound(&self, driver: &DriverConfig, fight: bool) -> Duration {
        let machine = &driver.machine;
        let longest_wait = [
            machine.denied_backoff.cap,
            machine.backoff.cap,
            machine.echo_timeout,
        ]
        .into_iter()
        .fold(Duration::ZERO, Duration::max);
        let longest_call = if self.faults.hangs > 0 {
            driver.call_timeout.max(self.faults.max_latency)
        } else {
            self.faults.max_latency
        };
        let bound = longest_call
            .saturating_add(self.max_lag().saturating_mul(3))
            .saturating_add(longest_wait)
            .saturating_add(machine.denied_backoff.cap)
            .saturating_add(LIVENESS_SLACK);
        if fight {
            bound.saturating_add(machine.contest.hold_cap)
        } else {
            bound
        }
    }

    /// How long after `quiet_at` tierd must have converged, given the timing of its machines.
    ///
    /// # Why this bound holds
    ///
    /// With λ the longest a call can take (the injected latency, or the driver's call timeout
    /// when calls hang), L the longest cache lag, W the longest wait a
    /// machine can be in (the largest of the contest hold-off cap, the denied backoff cap, the
    /// backoff cap and the echo timeout) and R the denied backoff cap:
    ///
    /// 1. by `quiet_at + λ` every call started during the fault phase has answered or been cut
    ///    by the call timeout; new calls meet no fault;
    /// 2. by `quiet_at + λ + L` every cache (the webhook's too) shows every write made before,
    ///    the adversary's last and the removal of the blockers. Every later write carries desired
    ///    fields, so no Tier drifts away from what a machine wrote any more: no new contest
    ///    hold-off starts (a held correction of a Tier that converges meanwhile is dropped);
    /// 3. a machine not converged then waits at most W (a hold-off, a transient, stale or blocked
    ///    retry, or an echo) and writes. An update, or a create whose priority is free, succeeds
    ///    or fails only because another initializer's write of the same fields is not in this
    ///    cache yet; either way the cache shows the Tier in sync within L;
    /// 4. a create can still be denied because a *system* Tier holds its priority (drifted there by
    ///    the adversary) until that Tier's own correction, possibly held off, lands (step 3: by `+
    ///    λ + L + W`). The blocked machine sends nothing before its cache shows the correction (`+
    ///    L`), but the webhook's cache may lag more and deny again; nothing wakes it then before R
    ///    (its short denied backoff). Its next create succeeds, and shows within L. Corrections are
    ///    updates, which admission never denies, so no longer chain exists.
    ///
    /// Hence `λ + 3L + W + R`. The test `tests/bound.rs` builds that chain (a contested
    /// `emergency` held off for 60 s on `application`'s priority, the webhook's cache 3 s
    /// behind): it converges 70.15 s after faults stopped, beyond `λ + 2L + W + 0.25 s`
    /// (66.25 s) and within this bound (79 s).
    pub fn convergence_bound(&self, driver: &DriverConfig) -> Duration {
        let machine = &driver.machine;
        // A Tier refused by RBAC until quiet waits up to the Forbidden backoff's cap.
        let forbidden = self
            .targeted
            .iter()
            .any(|f| f.effect == TargetedEffect::Forbidden)
            .then_some(machine.forbidden_backoff.cap);
        // A spent write budget holds up to `hold_cap` from the moment the next write is wanted,
        // which itself may follow a wait for the cache (the learned echo wait, at most the
        // backoff cap) or a transient backoff: the two add up.
        let budget_hold = machine
            .contest
            .hold_cap
            .saturating_add(machine.backoff.cap.max(machine.echo_timeout));
        let longest_wait = [
            budget_hold,
            machine.denied_backoff.cap,
            machine.backoff.cap,
            machine.echo_timeout,
        ]
        .into_iter()
        .chain(forbidden)
        .fold(Duration::ZERO, Duration::max);
        let hangs = self.faults.hangs > 0
            || self
                .targeted
                .iter()
                .any(|f| f.effect == TargetedEffect::Hang);
        let longest_call = if hangs {
            driver.call_timeout.max(self.faults.max_latency)
        } else {
            self.faults.max_latency
        };
        longest_call + self.max_lag() * 3 + longest_wait + machine.denied_backoff.cap
    }

    /// Whether the seed looks like issue 6694: `baseline` exists exactly at the start (so
    /// creating it again is an overlap denial) and some initializer's cache syncs only after
    /// it starts.
    pub fn resembles_issue_6694(&self) -> bool {
        let baseline = DesiredSet::antrea().tiers().first().cloned();
        baseline.is_some_and(|b| self.start.contains(&b))
            && self.initializers.iter().any(|i| !i.sync_after.is_zero())
    }

    /// Whether any adversary acts in this scenario.
    pub fn has_adversary(&self) -> bool {
        !self.adversary.is_empty()
    }

    /// A one-paragraph description, for `--verbose`.
    pub fn describe(&self) -> String {
        let mut out = format!("scenario of seed {}:\n  start:", self.seed);
        for t in &self.start {
            out.push_str(&format!(
                "\n    {} priority {} description {:?}",
                t.name, t.priority, t.description
            ));
        }
        for i in &self.initializers {
            out.push_str(&format!(
                "\n  initializer {}: starts at {:?}, cache syncs {:?} later, lags {:?}",
                i.name, i.start_at, i.sync_after, i.lag
            ));
        }
        out.push_str(&format!(
            "\n  webhook: reads {:?} (lag {:?}), unreachable until {:?}",
            self.webhook.view, self.webhook.lag, self.webhook.unreachable_until
        ));
        out.push_str(&format!(
            "\n  faults: fail {:.2}, lose response {:.2}, latency up to {:?}, retry-after {:?}, \
             {} hanging call(s)",
            self.faults.fail,
            self.faults.lose_response,
            self.faults.max_latency,
            self.faults.retry_after,
            self.faults.hangs
        ));
        out.push_str(&format!(
            "\n  quiet at {:?}; {} adversary event(s)",
            self.quiet_at,
            self.adversary.len()
        ));
        if self.world != World::Random {
            out.push_str(&format!("\n  world: {}", self.world.as_str()));
        }
        for f in &self.targeted {
            out.push_str(&format!(
                "\n  until quiet: every {} of {} gets {:?}",
                f.verb,
                f.name.as_deref().unwrap_or("any Tier"),
                f.effect
            ));
        }
        for c in &self.lag_changes {
            out.push_str(&format!("\n  at {:?}: caches lag {:?}", c.at, c.lag));
        }
        if let Some(name) = &self.pruned {
            out.push_str(&format!(
                "\n  until quiet: {name} is deleted as soon as it exists"
            ));
        }
        for e in self.adversary.iter().take(50) {
            out.push_str(&format!("\n    at {:?}: {:?}", e.at, e.action));
        }
        if self.adversary.len() > 50 {
            out.push_str(&format!("\n    ... {} more", self.adversary.len() - 50));
        }
        out
    }
}

pub(crate) fn as_millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A uniform duration in `[0, max]`, with millisecond resolution.
pub(crate) fn millis(rng: &mut fastrand::Rng, max: Duration) -> Duration {
    Duration::from_millis(rng.u64(0..=as_millis(max)))
}

/// A priority other than `desired`: half the time another system Tier's, else any valid one.
fn drifted_priority(rng: &mut fastrand::Rng, desired: i64) -> i64 {
    loop {
        let p = if rng.bool() {
            let tiers = DesiredSet::antrea();
            let i = rng.usize(0..tiers.len());
            tiers.tiers().get(i).map_or(0, |t| t.priority)
        } else {
            rng.i64(0..=250)
        };
        if p != desired {
            return p;
        }
    }
}

/// A user Tier's priority: mostly a desired one (a blocker), sometimes any other.
fn squat_priority(rng: &mut fastrand::Rng) -> i64 {
    let tiers = DesiredSet::antrea();
    if rng.u32(0..10) < 6 {
        let i = rng.usize(0..tiers.len());
        tiers.tiers().get(i).map_or(0, |t| t.priority)
    } else {
        rng.i64(0..=250)
    }
}

/// Someone who keeps changing one system Tier back, every 1 to 6 s until `quiet_at`, so that
/// tierd sees it as contested and holds its corrections off.
fn contest_edits(
    rng: &mut fastrand::Rng,
    desired: &DesiredSet,
    quiet_at: Duration,
) -> Vec<AdversaryEvent> {
    let Some(target) = desired.tiers().get(rng.usize(0..desired.len())).cloned() else {
        return Vec::new();
    };
    let mut events = Vec::new();
    let mut at = rng.u64(0..as_millis(quiet_at) / 2);
    while at < as_millis(quiet_at) {
        let action = if rng.bool() {
            AdversaryAction::EditPriority {
                name: target.name.clone(),
                priority: drifted_priority(rng, target.priority),
            }
        } else {
            AdversaryAction::EditDescription {
                name: target.name.clone(),
                description: "mine".to_owned(),
            }
        };
        events.push(AdversaryEvent {
            at: Duration::from_millis(at),
            action,
        });
        at += rng.u64(1_000..=6_000);
    }
    events
}

fn adversary_action(
    rng: &mut fastrand::Rng,
    desired: &DesiredSet,
    squatters: &mut Vec<String>,
) -> AdversaryAction {
    let system = desired
        .tiers()
        .get(rng.usize(0..desired.len()))
        .map_or_else(String::new, |t| t.name.clone());
    match rng.u32(0..100) {
        0..25 => {
            let name = format!("user-{}", squatters.len());
            squatters.push(name.clone());
            AdversaryAction::Squat {
                name,
                priority: squat_priority(rng),
            }
        }
        25..45 if !squatters.is_empty() => AdversaryAction::Unsquat {
            name: squatters
                .get(rng.usize(0..squatters.len()))
                .cloned()
                .unwrap_or_default(),
        },
        25..65 => AdversaryAction::DeleteSystem { name: system },
        65..80 => {
            let current = desired.get(&system).map_or(0, |t| t.priority);
            AdversaryAction::EditPriority {
                priority: drifted_priority(rng, current),
                name: system,
            }
        }
        _ => AdversaryAction::EditDescription {
            name: system,
            description: format!("edited at random {}", rng.u16(..)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_is_deterministic_and_varied() {
        assert_eq!(Scenario::generate(7), Scenario::generate(7));
        assert_ne!(Scenario::generate(7), Scenario::generate(8));
        let scenarios: Vec<Scenario> = (0..200).map(Scenario::generate).collect();
        assert!(scenarios.iter().any(|s| s.initializers.len() == 3));
        assert!(scenarios.iter().any(Scenario::resembles_issue_6694));
        assert!(scenarios.iter().any(Scenario::has_adversary));
        assert!(scenarios.iter().any(|s| !s.has_adversary()));
        for s in &scenarios {
            assert!((MIN_QUIET_AT..=MAX_QUIET_AT).contains(&s.quiet_at));
            assert!(s.adversary.iter().all(|e| e.at < s.quiet_at));
            assert!(
                s.initializers
                    .iter()
                    .all(|i| i.start_at + i.sync_after < s.quiet_at)
            );
        }
    }

    #[test]
    fn the_bound_adds_up() {
        let mut s = Scenario::issue_6694();
        s.faults.max_latency = Duration::from_secs(1);
        s.initializers[0].lag = Duration::from_secs(2);
        // 1 + 3 * 2 + 60 (write-budget hold cap) + 10 (the echo wait or backoff before it)
        // + 1 (denied backoff cap)
        assert_eq!(
            s.convergence_bound(&DriverConfig::default()),
            Duration::from_secs(78)
        );
        // A hanging call takes up to the call timeout (30 s) instead.
        s.faults.hangs = 1;
        assert_eq!(
            s.convergence_bound(&DriverConfig::default()),
            Duration::from_secs(107)
        );
    }
}

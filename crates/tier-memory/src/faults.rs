//! Scriptable and seeded random faults of the API server, applied to writer calls.
//!
//! A scripted fault affects the next `n` calls of one verb (optionally for one Tier name or one
//! client), or every such call until [`Faults::clear`] ([`forever`](FaultBuilder::forever): a
//! per-object failure, a per-verb RBAC refusal); each call consumes at most one fault, the
//! oldest matching one. What a fault does:
//!
//! - [`with`](FaultBuilder::with): fail with an error, without applying the write;
//! - [`lose_response`](FaultBuilder::lose_response): apply the write, then report an error (a
//!   timeout or connection reset after the server committed);
//! - [`delay`](FaultBuilder::delay): answer normally, later (on tokio's clock);
//! - [`hang`](FaultBuilder::hang): never answer: the caller's timeout must cut the call.
//!
//! [`after`](FaultBuilder::after) adds a delay before the failure or lost response.
//!
//! The random mode ([`Faults::random`]) fails or loses each call with given probabilities and
//! adds a random latency, deterministically for a given seed and call order.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! use std::time::Duration;
//! use tier_core::{TierSpec, TierWriter, WriteError};
//! use tier_memory::{MemoryCluster, Verb};
//!
//! let cluster = MemoryCluster::new();
//! cluster
//!     .faults()
//!     .fail_next(Verb::Create, 1)
//!     .for_name("baseline")
//!     .with(WriteError::transient("503").with_retry_after(Duration::from_secs(2)));
//! let baseline = TierSpec::new("baseline", 253, "");
//! assert!(cluster.create(&baseline).await.is_err());
//! assert!(cluster.create(&baseline).await.is_ok());
//! # }
//! ```

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tier_core::WriteError;

use crate::backend::{ANTREA_TIERS, Resource};
use crate::calls::Verb;
use crate::lock;

/// The handle scripting a cluster's faults. Cheap to clone; clones share the script.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    state: Arc<Mutex<FaultState>>,
}

#[derive(Debug, Default)]
struct FaultState {
    rules: Vec<Rule>,
    random: Option<RandomState>,
}

#[derive(Clone, Debug)]
struct Rule {
    verb: Verb,
    name: Option<String>,
    client: Option<String>,
    remaining: u32,
    /// Never used up: `remaining` is not decremented.
    forever: bool,
    after: Duration,
    effect: Effect,
}

impl Rule {
    fn matches(&self, verb: Verb, name: &str, client: &str) -> bool {
        (self.forever || self.remaining > 0)
            && self.verb == verb
            && self.name.as_deref().is_none_or(|n| n == name)
            && self.client.as_deref().is_none_or(|c| c == client)
    }
}

/// What a fault does to one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Effect {
    /// Answer normally.
    Proceed,
    /// Report the error without applying the write.
    Fail(WriteError),
    /// Apply the write, then report the error.
    LoseResponse(WriteError),
    /// Never answer.
    Hang,
}

/// What to do with one call: wait `delay`, then `effect`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) delay: Duration,
    pub(crate) effect: Effect,
}

/// A fault being scripted; nothing happens until a finishing method
/// ([`with`](Self::with), [`lose_response`](Self::lose_response), [`delay`](Self::delay),
/// [`hang`](Self::hang)) installs it.
#[must_use = "a fault is installed only by with, lose_response, delay or hang"]
#[derive(Debug)]
pub struct FaultBuilder {
    faults: Faults,
    rule: Rule,
}

impl FaultBuilder {
    /// Only calls for the Tier `name` match.
    pub fn for_name(mut self, name: impl Into<String>) -> Self {
        self.rule.name = Some(name.into());
        self
    }

    /// Only calls from the writer named `client` match.
    pub fn for_client(mut self, client: impl Into<String>) -> Self {
        self.rule.client = Some(client.into());
        self
    }

    /// Matches every matching call until [`Faults::clear`], whatever `times` was: a fault of one
    /// object (a Tier whose writes always fail) or of one verb (RBAC refusing `update`).
    pub fn forever(mut self) -> Self {
        self.rule.forever = true;
        self
    }

    /// Waits `delay` (tokio's clock) before the failure or the lost response.
    pub fn after(mut self, delay: Duration) -> Self {
        self.rule.after = delay;
        self
    }

    /// Installs: each matching call fails with `error` and changes nothing.
    pub fn with(self, error: WriteError) -> Faults {
        self.install(Effect::Fail(error))
    }

    /// Installs: each matching call is applied, then reports `error` (its response is lost).
    pub fn lose_response(self, error: WriteError) -> Faults {
        self.install(Effect::LoseResponse(error))
    }

    /// Installs: each matching call answers normally, `delay` later.
    pub fn delay(mut self, delay: Duration) -> Faults {
        self.rule.after = delay;
        self.install(Effect::Proceed)
    }

    /// Installs: each matching call never answers (and is never applied).
    pub fn hang(self) -> Faults {
        self.install(Effect::Hang)
    }

    fn install(mut self, effect: Effect) -> Faults {
        self.rule.effect = effect;
        tracing::debug!(rule = ?self.rule, "fault scripted");
        lock(&self.faults.state).rules.push(self.rule);
        self.faults
    }
}

/// The seeded random fault mode, for simulations.
///
/// Every call draws, in this order, one number for its fault and one for its latency, so a run
/// is reproducible from the seed and the order of calls. A scripted fault matching the call
/// replaces the random one (the draws still happen).
#[derive(Clone, Debug, PartialEq)]
pub struct RandomFaults {
    /// The seed of the generator.
    pub seed: u64,
    /// The probability that a call fails (transient, not applied).
    pub fail: f64,
    /// The probability that a call is applied but its response is lost (transient).
    pub lose_response: f64,
    /// Each call is delayed by a uniform random duration up to this.
    pub max_latency: Duration,
    /// The `Retry-After` of random failures.
    pub retry_after: Option<Duration>,
}

impl RandomFaults {
    /// No faults and no latency yet, from `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            fail: 0.0,
            lose_response: 0.0,
            max_latency: Duration::ZERO,
            retry_after: None,
        }
    }

    /// Fails calls with probability `p`.
    pub fn failing(mut self, p: f64) -> Self {
        self.fail = p;
        self
    }

    /// Loses responses of applied calls with probability `p`.
    pub fn losing_responses(mut self, p: f64) -> Self {
        self.lose_response = p;
        self
    }

    /// Delays every call by up to `max`.
    pub fn latency(mut self, max: Duration) -> Self {
        self.max_latency = max;
        self
    }

    /// Random failures carry this `Retry-After`.
    pub fn retry_after(mut self, retry_after: Duration) -> Self {
        self.retry_after = Some(retry_after);
        self
    }
}

#[derive(Debug)]
struct RandomState {
    config: RandomFaults,
    rng: fastrand::Rng,
}

impl RandomState {
    fn draw(&mut self) -> Plan {
        let fault = self.rng.f64();
        let latency = self.rng.f64();
        let config = &self.config;
        let effect = if fault < config.fail {
            let error = unavailable();
            Effect::Fail(match config.retry_after {
                Some(after) => error.with_retry_after(after),
                None => error,
            })
        } else if fault < config.fail + config.lose_response {
            Effect::LoseResponse(timeout())
        } else {
            Effect::Proceed
        };
        Plan {
            delay: config.max_latency.mul_f64(latency),
            effect,
        }
    }
}

impl Faults {
    /// Starts scripting a fault for the next `times` calls of `verb`. Despite the name, the
    /// fault may also be a delay or a hang.
    pub fn fail_next(&self, verb: Verb, times: u32) -> FaultBuilder {
        FaultBuilder {
            faults: self.clone(),
            rule: Rule {
                verb,
                name: None,
                client: None,
                remaining: times,
                forever: false,
                after: Duration::ZERO,
                effect: Effect::Proceed,
            },
        }
    }

    /// Turns on the seeded random mode (replacing any previous one).
    pub fn random(&self, config: RandomFaults) -> &Self {
        let rng = fastrand::Rng::with_seed(config.seed);
        lock(&self.state).random = Some(RandomState { config, rng });
        self
    }

    /// Turns off the random mode.
    pub fn stop_random(&self) -> &Self {
        lock(&self.state).random = None;
        self
    }

    /// Removes every scripted fault and the random mode.
    pub fn clear(&self) {
        let mut state = lock(&self.state);
        state.rules.clear();
        state.random = None;
    }

    /// How many scripted faults are left to consume, summed over every script (`u32::MAX` while
    /// a [`forever`](FaultBuilder::forever) fault is installed).
    pub fn pending(&self) -> u32 {
        lock(&self.state)
            .rules
            .iter()
            .map(|r| if r.forever { u32::MAX } else { r.remaining })
            .fold(0, u32::saturating_add)
    }

    /// Decides the fate of one call, consuming at most one scripted fault.
    pub(crate) fn plan(&self, verb: Verb, name: &str, client: &str) -> Plan {
        let mut state = lock(&self.state);
        let random = state.random.as_mut().map(RandomState::draw);
        let scripted = state
            .rules
            .iter_mut()
            .find(|r| r.matches(verb, name, client))
            .map(|rule| {
                if !rule.forever {
                    rule.remaining = rule.remaining.saturating_sub(1);
                }
                Plan {
                    delay: rule.after,
                    effect: rule.effect.clone(),
                }
            });
        state.rules.retain(|r| r.forever || r.remaining > 0);
        match (scripted, random) {
            (Some(mut plan), random) => {
                let latency = random.map_or(Duration::ZERO, |r| r.delay);
                plan.delay = plan.delay.saturating_add(latency);
                plan
            }
            (None, Some(plan)) => plan,
            (None, None) => Plan {
                delay: Duration::ZERO,
                effect: Effect::Proceed,
            },
        }
    }
}

/// A 503 as a client sees it: transient.
pub fn unavailable() -> WriteError {
    WriteError::transient("the server is currently unable to handle the request")
}

/// A 429 with `Retry-After`, as a client sees it: transient.
pub fn too_many_requests(retry_after: Duration) -> WriteError {
    WriteError::transient(
        "the server has received too many requests and has asked us to try again later",
    )
    .with_retry_after(retry_after)
}

/// A 403 from RBAC for `verb` on Tiers, worded as kube-apiserver words it (so the permission
/// can be read from it), as a client sees it: [`Forbidden`](tier_core::ErrorClass::Forbidden),
/// naming the permission. RBAC cannot restrict `create` by object name: a create refused for
/// one Tier is refused for every Tier.
pub fn forbidden(verb: Verb, user: &str) -> WriteError {
    forbidden_on(ANTREA_TIERS, verb, user)
}

/// [`forbidden`] for the Tier resource `resource` (Calico's: [`CALICO_TIERS`](crate::CALICO_TIERS)).
pub fn forbidden_on(resource: Resource, verb: Verb, user: &str) -> WriteError {
    let (plural, group) = resource
        .plural
        .split_once('.')
        .unwrap_or((resource.plural, ""));
    let permission =
        format!("{verb} resource \"{plural}\" in API group \"{group}\" at the cluster scope");
    WriteError::forbidden(
        format!(
            "{} is forbidden: User \"{user}\" cannot {permission}",
            resource.plural
        ),
        Some(permission),
    )
}

/// A 404 for the Tier resource `resource` itself, as while its CRD is not installed, as a
/// client sees it: [`NotInstalled`](tier_core::ErrorClass::NotInstalled).
pub fn not_installed(resource: Resource) -> WriteError {
    WriteError::not_installed(format!(
        "the server could not find the requested resource (post {})",
        resource.plural
    ))
}

/// A request that timed out on the client side: transient. The server may have applied it.
pub fn timeout() -> WriteError {
    WriteError::transient("request timed out: context deadline exceeded")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn effect(faults: &Faults, verb: Verb, name: &str) -> Effect {
        faults.plan(verb, name, "tierd").effect
    }

    #[test]
    fn a_script_is_consumed_exactly_n_times_by_matching_calls() {
        let faults = Faults::default();
        let err = WriteError::transient("boom");
        faults
            .fail_next(Verb::Create, 2)
            .for_name("a")
            .with(err.clone());
        assert_eq!(faults.pending(), 2);
        assert_eq!(effect(&faults, Verb::Update, "a"), Effect::Proceed);
        assert_eq!(effect(&faults, Verb::Create, "b"), Effect::Proceed);
        assert_eq!(
            effect(&faults, Verb::Create, "a"),
            Effect::Fail(err.clone())
        );
        assert_eq!(effect(&faults, Verb::Create, "a"), Effect::Fail(err));
        assert_eq!(effect(&faults, Verb::Create, "a"), Effect::Proceed);
        assert_eq!(faults.pending(), 0);
    }

    #[test]
    fn the_oldest_matching_script_wins_and_clients_filter() {
        let faults = Faults::default();
        faults.fail_next(Verb::Update, 1).for_client("other").hang();
        faults
            .fail_next(Verb::Update, 1)
            .delay(Duration::from_secs(3));
        faults.fail_next(Verb::Update, 1).hang();
        let plan = faults.plan(Verb::Update, "x", "tierd");
        assert_eq!(plan.delay, Duration::from_secs(3));
        assert_eq!(plan.effect, Effect::Proceed);
        assert_eq!(effect(&faults, Verb::Update, "x"), Effect::Hang);
        assert_eq!(faults.plan(Verb::Update, "x", "other").effect, Effect::Hang);
        assert_eq!(faults.pending(), 0);
    }

    #[test]
    fn random_mode_is_deterministic_per_seed() {
        let run = |seed| {
            let faults = Faults::default();
            faults.random(
                RandomFaults::new(seed)
                    .failing(0.3)
                    .losing_responses(0.2)
                    .latency(Duration::from_millis(100)),
            );
            (0..200)
                .map(|_| faults.plan(Verb::Create, "a", "c"))
                .collect::<Vec<_>>()
        };
        let a = run(7);
        assert_eq!(a, run(7));
        assert_ne!(a, run(8));
        let fails = a
            .iter()
            .filter(|p| matches!(p.effect, Effect::Fail(_)))
            .count();
        let lost = a
            .iter()
            .filter(|p| matches!(p.effect, Effect::LoseResponse(_)))
            .count();
        assert!((35..85).contains(&fails), "{fails}");
        assert!((20..60).contains(&lost), "{lost}");
        assert!(a.iter().all(|p| p.delay <= Duration::from_millis(100)));
    }

    #[test]
    fn a_forever_fault_is_never_used_up_and_only_clear_removes_it() {
        let faults = Faults::default();
        let refused = forbidden(Verb::Update, "tierd");
        faults
            .fail_next(Verb::Update, 1)
            .forever()
            .with(refused.clone());
        faults
            .fail_next(Verb::Create, 0)
            .for_name("a")
            .forever()
            .hang();
        for _ in 0..1000 {
            assert_eq!(
                effect(&faults, Verb::Update, "x"),
                Effect::Fail(refused.clone())
            );
            assert_eq!(effect(&faults, Verb::Create, "a"), Effect::Hang);
        }
        assert_eq!(effect(&faults, Verb::Create, "b"), Effect::Proceed);
        assert_eq!(faults.pending(), u32::MAX);
        assert_eq!(
            refused.permission.as_deref(),
            Some("update resource \"tiers\" in API group \"crd.antrea.io\" at the cluster scope")
        );
        assert!(
            refused
                .message
                .ends_with(refused.permission.as_deref().unwrap_or("?"))
        );
        faults.clear();
        assert_eq!(faults.pending(), 0);
        assert_eq!(effect(&faults, Verb::Update, "x"), Effect::Proceed);
    }

    #[test]
    fn clear_removes_everything() {
        let faults = Faults::default();
        faults.fail_next(Verb::Create, 5).hang();
        faults.random(RandomFaults::new(1).failing(1.0));
        faults.clear();
        assert_eq!(faults.pending(), 0);
        assert_eq!(effect(&faults, Verb::Create, "a"), Effect::Proceed);
    }
}

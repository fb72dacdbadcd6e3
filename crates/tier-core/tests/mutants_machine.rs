//! The per-Tier machine's decisions in detail (written against `cargo mutants`: each test pins
//! one decision a surviving mutant showed untested), stepped by hand on virtual time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use tier_core::{
    Action, MachineConfig, Observed, ObservedTier, TierMachine, TierSpec, TierState, WriteError,
};

const MS: Duration = Duration::from_millis(1);
const S: Duration = Duration::from_secs(1);

/// The desired Tier of every test here.
fn desired() -> TierSpec {
    TierSpec::new("t", 10, "d")
}

/// The cache shows Tier `t` with these fields at resourceVersion `rv`.
fn shows(priority: i64, description: &str, rv: u64) -> Observed {
    Observed::Present(ObservedTier {
        name: "t".into(),
        priority,
        description: description.into(),
        resource_version: rv.to_string(),
        last_writer: None,
    })
}

/// A machine whose write budget never runs out, so only the rule under test decides.
fn machine() -> TierMachine {
    let mut config = MachineConfig::default();
    config.contest.burst = 1000;
    TierMachine::new(desired(), config, 7).unwrap()
}

/// Fires the timers due at `now` and asks for the call to make.
fn step(m: &mut TierMachine, now: Instant) -> Option<Action> {
    m.handle_timeout(now);
    m.poll_action(now)
}

/// Steps `m` from `from` at its own timeouts until it calls (at most `within`); returns when.
fn next_call(m: &mut TierMachine, from: Instant, within: Duration) -> Option<(Instant, Action)> {
    let mut now = from;
    loop {
        if let Some(action) = step(m, now) {
            return Some((now, action));
        }
        now = m.poll_timeout()?.max(now + MS);
        if now > from + within {
            return None;
        }
    }
}

fn refused(verb: &str) -> WriteError {
    WriteError::forbidden(
        format!("cannot {verb} resource tiers"),
        Some(format!("{verb} tiers.crd.antrea.io")),
    )
}

#[test]
fn a_refusal_of_the_other_verb_starts_its_own_attempt_count() {
    // Updates are refused until the backoff is long; then the Tier is deleted and its create
    // is refused too: that is the create's first refusal (attempt 1, since now, the first
    // step of the forbidden backoff), not the update's tenth.
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(shows(11, "d", 1), 1, t0);
    let mut now = t0;
    for _ in 0..8 {
        let (at, action) = next_call(&mut m, now, 600 * S).unwrap();
        assert!(matches!(action, Action::Update { .. }));
        m.handle_outcome(Err(refused("update")), at);
        now = at;
    }
    let deleted = now + MS;
    m.handle_observation(Observed::Absent, 2, deleted);
    let (at, action) = next_call(&mut m, deleted, S).expect("the create goes at once");
    assert_eq!(at, deleted);
    assert_eq!(action, Action::Create(desired()));
    m.handle_outcome(Err(refused("create")), at);
    match m.status().state {
        TierState::Forbidden {
            since,
            attempt,
            permission,
            ..
        } => {
            assert_eq!((since, attempt), (at, 1));
            assert_eq!(permission.as_deref(), Some("create tiers.crd.antrea.io"));
        }
        other => panic!("{other:?}"),
    }
    let (retry, _) = next_call(&mut m, at, 60 * S).unwrap();
    assert!(retry - at <= S, "the first step: {:?}", retry - at);
}

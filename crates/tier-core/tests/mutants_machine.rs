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

#[test]
fn an_unsynced_machine_is_not_ready_whatever_time_does() {
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(Observed::Unknown, 0, t0);
    m.handle_timeout(t0 + 60 * S);
    assert!(!m.is_ready(), "it would not call: nothing is known");
    assert_eq!(m.poll_action(t0 + 60 * S), None);
    assert_eq!(m.poll_timeout(), None);
    m.handle_observation(Observed::Absent, 1, t0 + 61 * S);
    assert!(m.is_ready());
}

#[test]
fn only_an_echo_shortens_a_learned_echo_wait() {
    // The cache lagged once: the echo wait is 6 s. A write is confirmed; a second later the
    // cache lists again without showing it (another Tier changed): that is no echo, and the
    // learned wait stays. The echo itself, 5 s after the write (more than half of 6 s), does
    // not shorten it either.
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(shows(11, "d", 1), 1, t0);
    assert!(matches!(step(&mut m, t0), Some(Action::Update { .. })));
    m.handle_outcome(Ok(()), t0);
    let t1 = t0 + 3 * S;
    let again = step(&mut m, t1).expect("the echo did not come: the write goes again");
    assert!(matches!(again, Action::Update { .. }));
    assert_eq!(m.echo_wait(), 6 * S);
    m.handle_outcome(Ok(()), t1);
    m.handle_observation(shows(11, "d", 1), 2, t1 + S);
    assert_eq!(m.echo_wait(), 6 * S, "an unchanged Tier is no echo");
    assert_eq!(m.poll_timeout(), Some(t1 + 6 * S));
    m.handle_observation(shows(10, "d", 2), 3, t1 + 5 * S);
    assert!(m.is_converged());
    assert_eq!(m.echo_wait(), 6 * S);
}

#[test]
fn a_tier_at_its_write_bound_says_so_once_in_its_state_and_its_rendering() {
    // Someone keeps changing the Tier back: after the burst the next correction is held and
    // the Tier is contested; the rendering says so in the contest's words, without the
    // budget note. A Tier whose own writes keep failing reaches the bound too: its state keeps
    // the cause and the rendering notes the budget.
    let t0 = Instant::now();
    let mut m = TierMachine::new(desired(), MachineConfig::default(), 7).unwrap();
    m.handle_observation(shows(10, "d", 1), 1, t0);
    assert!(!m.status().is_write_limited());
    let mut rv = 1;
    let mut now = t0;
    let held = loop {
        now += 100 * MS;
        rv += 1;
        m.handle_observation(shows(11, "d", rv), rv, now);
        match step(&mut m, now) {
            Some(Action::Update { .. }) => {
                m.handle_outcome(Ok(()), now);
                rv += 1;
                m.handle_observation(shows(10, "d", rv), rv, now);
                assert!(m.is_converged());
                assert!(!m.status().is_write_limited());
            }
            Some(other) => panic!("{other:?}"),
            None => break m.status(),
        }
    };
    assert!(
        matches!(held.state, TierState::Contested { .. }),
        "{held:?}"
    );
    assert!(held.is_write_limited());
    let words = held.to_string();
    assert!(words.contains("undid tierd's accepted writes"), "{words}");
    assert!(!words.contains("write budget"), "{words}");

    let mut failing = TierMachine::new(desired(), MachineConfig::default(), 7).unwrap();
    failing.handle_observation(Observed::Absent, 1, t0);
    let mut now = t0;
    while !failing.status().is_write_limited() {
        let (at, _) = next_call(&mut failing, now, 600 * S).unwrap();
        failing.handle_outcome(Err(WriteError::transient("503")), at);
        now = at;
        assert!(now < t0 + 60 * S, "{:?}", failing.status());
    }
    let status = failing.status();
    assert!(
        matches!(status.state, TierState::Retrying { .. }),
        "{status:?}"
    );
    assert!(status.held.is_some());
    assert!(
        status.to_string().contains("write budget spent"),
        "{status}"
    );
}

#[test]
fn time_a_full_budget_spends_full_earns_nothing() {
    // The budget (3 tokens, one back per 20 s) is full again 40 s after one correction, and
    // stays full until the next: that idle time buys no token. After three quick corrections
    // at 50, 51 and 52 s, a fourth at 65 s (15 s after the first of them) is held.
    let t0 = Instant::now();
    let mut m = TierMachine::new(desired(), MachineConfig::default(), 7).unwrap();
    let mut rv = 1;
    m.handle_observation(shows(10, "d", rv), rv, t0);
    let mut correct = |m: &mut TierMachine, at: Instant| {
        rv += 1;
        m.handle_observation(shows(11, "d", rv), rv, at);
        let action = m.poll_action(at)?;
        assert!(matches!(action, Action::Update { .. }));
        m.handle_outcome(Ok(()), at);
        rv += 1;
        m.handle_observation(shows(10, "d", rv), rv, at);
        assert!(m.is_converged());
        Some(at)
    };
    for secs in [0, 50_000, 51_000, 52_000] {
        let at = t0 + 100 * MS + secs * MS;
        assert!(correct(&mut m, at).is_some(), "at {secs} ms");
    }
    assert_eq!(correct(&mut m, t0 + 65 * S), None, "held: no token left");
    assert!(matches!(m.status().state, TierState::Contested { .. }));
}

#[test]
fn every_timing_may_be_a_day_and_no_more() {
    // The documented range of every duration: 1 ms ..= 1 day.
    let day = Duration::from_secs(24 * 60 * 60);
    let mut config = MachineConfig::default();
    config.forbidden_backoff.cap = day;
    config.not_installed_retry = day;
    config.contest.hold_cap = day;
    assert_eq!(config.validate(), Ok(()));
    config.not_installed_retry = day + MS;
    let error = config.validate().unwrap_err();
    assert_eq!(error.field, "machine.not_installed_retry");
    assert!(error.to_string().contains("86400s"), "{error}");
}

#[test]
fn the_write_bound_counts_the_hold_that_reaches_the_cap_once() {
    // Holds of 1, 2, 4 ... 32 s, then 64 s = the cap: seven holds reach it, then one write per
    // 64 s. In 300 s: 3 (burst) + 15 (one token per 20 s) + 7 + 4 (300 / 64).
    let policy = tier_core::ContestPolicy {
        burst: 3,
        refill: 20 * S,
        hold_initial: S,
        hold_cap: 64 * S,
    };
    assert_eq!(policy.max_writes(300 * S), 3 + 15 + 7 + 4);
}

//! The per-Tier state machine, stepped by hand: no runtime, no clock, time passed in.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use tier_core::{
    Action, ErrorClass, MachineConfig, Observed, ObservedTier, TierMachine, TierSpec, TierState,
    WriteError,
};

fn spec() -> TierSpec {
    TierSpec::new("baseline", 253, "desc")
}

fn present(priority: i64, description: &str, rv: &str) -> Observed {
    Observed::Present(ObservedTier {
        name: "baseline".into(),
        priority,
        description: description.into(),
        resource_version: rv.into(),
    })
}

fn machine() -> TierMachine {
    TierMachine::new(spec(), MachineConfig::default(), 1)
}

const MS: Duration = Duration::from_millis(1);

#[test]
fn waits_for_sync_then_creates_once() {
    let t0 = Instant::now();
    let mut m = machine();
    assert_eq!(m.poll_action(t0), None);
    m.handle_observation(Observed::Unknown, 0, t0);
    assert_eq!(m.poll_action(t0), None, "no action before sync");
    m.handle_observation(Observed::Absent, 1, t0);
    assert_eq!(m.poll_action(t0), Some(Action::Create(spec())));
    assert!(m.is_in_flight());
    assert_eq!(m.poll_action(t0), None, "one call in flight at most");
    m.handle_observation(Observed::Absent, 2, t0);
    assert_eq!(
        m.poll_action(t0),
        None,
        "observations do not start a second call"
    );
}

#[test]
fn waits_for_the_echo_of_a_write() {
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(Observed::Absent, 1, t0);
    let _ = m.poll_action(t0);
    m.handle_outcome(Ok(()), t0);
    // The cache still shows the pre-write state: no second create.
    m.handle_observation(Observed::Absent, 1, t0 + 100 * MS);
    assert_eq!(m.poll_action(t0 + 100 * MS), None);
    assert_eq!(m.poll_timeout(), Some(t0 + Duration::from_secs(3)));
    m.handle_observation(present(253, "desc", "5"), 2, t0 + 200 * MS);
    assert!(m.is_converged());
    assert_eq!(m.status().state, TierState::Converged);
    assert_eq!(m.status().converged_at, Some(t0 + 200 * MS));
}

#[test]
fn a_write_never_echoed_is_retried_after_the_deadline() {
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(Observed::Absent, 1, t0);
    let _ = m.poll_action(t0);
    m.handle_outcome(Ok(()), t0);
    let deadline = m.poll_timeout().unwrap();
    assert_eq!(m.poll_action(deadline - MS), None);
    assert_eq!(m.poll_action(deadline), Some(Action::Create(spec())));
}

#[test]
fn transient_errors_back_off_with_jitter_and_retry_after() {
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(Observed::Absent, 1, t0);
    let mut now = t0;
    let mut waits = Vec::new();
    for attempt in 1..=8u32 {
        assert!(m.poll_action(now).is_some(), "attempt {attempt}");
        m.handle_outcome(Err(WriteError::transient("503")), now);
        let next = m.poll_timeout().unwrap();
        waits.push(next - now);
        assert_eq!(
            m.poll_action(next - MS),
            None,
            "no retry before the backoff ends"
        );
        match m.status().state {
            TierState::Retrying {
                attempt: a, class, ..
            } => {
                assert_eq!((a, class), (attempt, ErrorClass::Transient))
            }
            other => panic!("{other:?}"),
        }
        now = next;
    }
    let nominal = [250u64, 500, 1000, 2000, 4000, 8000, 10000, 10000];
    for (wait, nominal) in waits.iter().zip(nominal) {
        let nominal = Duration::from_millis(nominal);
        assert!(
            *wait >= nominal / 2 && *wait <= nominal,
            "{wait:?} vs {nominal:?}"
        );
    }
    // Retry-After is a lower bound.
    let _ = m.poll_action(now);
    m.handle_outcome(
        Err(WriteError::transient("429").with_retry_after(Duration::from_secs(9))),
        now,
    );
    assert!(m.poll_timeout().unwrap() - now >= Duration::from_secs(9));
}

#[test]
fn convergence_during_a_backoff_ends_it_and_resets_attempts() {
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(Observed::Absent, 1, t0);
    let _ = m.poll_action(t0);
    m.handle_outcome(Err(WriteError::transient("timeout")), t0);
    m.handle_observation(present(253, "desc", "9"), 2, t0 + MS);
    assert!(m.is_converged());
    assert_eq!(m.poll_timeout(), None);
    // A later drift starts from attempt 1 again.
    m.handle_observation(present(1, "desc", "10"), 3, t0 + 2 * MS);
    let _ = m.poll_action(t0 + 2 * MS);
    m.handle_outcome(Err(WriteError::transient("timeout")), t0 + 2 * MS);
    assert!(matches!(
        m.status().state,
        TierState::Retrying { attempt: 1, .. }
    ));
}

#[test]
fn stale_errors_wait_for_a_change_of_this_tier_not_for_a_backoff() {
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(present(1, "", "5"), 1, t0);
    let action = m.poll_action(t0);
    assert_eq!(
        action,
        Some(Action::Update {
            tier: spec(),
            resource_version: "5".into()
        })
    );
    m.handle_outcome(Err(WriteError::stale("Conflict")), t0);
    // Nothing changed: no hot loop, not even when another Tier changes.
    assert_eq!(m.poll_action(t0), None);
    m.handle_observation(present(1, "", "5"), 2, t0 + MS);
    assert_eq!(m.poll_action(t0 + MS), None);
    // This Tier changed: decide again at once, on the new version.
    m.handle_observation(present(2, "", "6"), 3, t0 + 2 * MS);
    assert_eq!(
        m.poll_action(t0 + 2 * MS),
        Some(Action::Update {
            tier: spec(),
            resource_version: "6".into()
        })
    );
}

#[test]
fn stale_errors_fall_back_to_the_backoff_when_nothing_changes() {
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(Observed::Absent, 1, t0);
    let _ = m.poll_action(t0);
    m.handle_outcome(Err(WriteError::stale("AlreadyExists")), t0);
    let fallback = m.poll_timeout().unwrap();
    assert_eq!(
        fallback - t0,
        Duration::from_secs(3),
        "the cache gets the echo timeout"
    );
    assert_eq!(m.poll_action(fallback), Some(Action::Create(spec())));
}

#[test]
fn blocked_tiers_retry_on_any_set_change_and_slowly_otherwise() {
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(Observed::Absent, 1, t0);
    let _ = m.poll_action(t0);
    m.handle_outcome(Err(WriteError::blocked("overlaps with existing Tier")), t0);
    match m.status().state {
        TierState::Blocked { since, message, .. } => {
            assert_eq!(since, t0);
            assert_eq!(message, "overlaps with existing Tier");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(m.poll_timeout(), Some(t0 + Duration::from_secs(10)));
    assert_eq!(m.poll_action(t0 + Duration::from_secs(5)), None);
    // Another Tier changed (the squatter went away): retry now.
    m.handle_observation(Observed::Absent, 2, t0 + Duration::from_secs(5));
    assert_eq!(
        m.poll_action(t0 + Duration::from_secs(5)),
        Some(Action::Create(spec()))
    );
    m.handle_outcome(
        Err(WriteError::blocked("still")),
        t0 + Duration::from_secs(6),
    );
    match m.status().state {
        TierState::Blocked { since, attempt, .. } => assert_eq!((since, attempt), (t0, 2)),
        other => panic!("{other:?}"),
    }
    // Nothing changes: the slow retry.
    let t1 = t0 + Duration::from_secs(16);
    assert_eq!(m.poll_action(t1 - MS), None);
    assert_eq!(m.poll_action(t1), Some(Action::Create(spec())));
}

#[test]
fn drift_after_convergence_is_corrected_and_counted() {
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(present(253, "desc", "1"), 1, t0);
    assert!(m.is_converged());
    assert_eq!(m.poll_action(t0), None);
    m.handle_observation(present(253, "edited", "2"), 2, t0 + MS);
    assert_eq!(
        m.poll_action(t0 + MS),
        Some(Action::Update {
            tier: spec(),
            resource_version: "2".into()
        })
    );
    assert_eq!(
        m.status().corrections,
        0,
        "we had not written it: not a correction"
    );
    m.handle_outcome(Ok(()), t0 + MS);
    m.handle_observation(present(253, "desc", "3"), 3, t0 + 2 * MS);
    m.handle_observation(present(253, "edited", "4"), 4, t0 + 3 * MS);
    assert!(m.poll_action(t0 + 3 * MS).is_some());
    assert_eq!(m.status().corrections, 1);
}

#[test]
fn a_contested_tier_holds_off_corrections_longer_and_longer() {
    let t0 = Instant::now();
    let mut m = machine();
    let mut now = t0;
    let mut rv = 0;
    let mut holds = Vec::new();
    m.handle_observation(present(1, "", "0"), 0, now);
    for _ in 0..12 {
        // Decide (maybe after a hold), write, see our write, then see it reverted.
        let action = match m.poll_action(now) {
            Some(action) => action,
            None => {
                let until = m.poll_timeout().unwrap();
                assert!(matches!(m.status().state, TierState::Contested { .. }));
                holds.push(until - now);
                now = until;
                m.poll_action(now).unwrap()
            }
        };
        assert!(matches!(action, Action::Update { .. }));
        m.handle_outcome(Ok(()), now);
        rv += 1;
        m.handle_observation(present(253, "desc", &rv.to_string()), rv, now);
        rv += 1;
        now += 10 * MS;
        m.handle_observation(present(1, "", &rv.to_string()), rv, now);
    }
    let secs: Vec<u64> = holds.iter().map(Duration::as_secs).collect();
    assert_eq!(secs, [1, 2, 4, 8, 16, 32, 60, 60]);
    assert!(m.status().contested);
    assert_eq!(m.status().corrections, 11);
    // After a quiet spell longer than the policy's, a correction is immediate again.
    assert_eq!(m.poll_action(now), None, "held off");
    now = m.poll_timeout().unwrap();
    assert!(m.poll_action(now).is_some());
    m.handle_outcome(Ok(()), now);
    m.handle_observation(present(253, "desc", "100"), 100, now);
    now += Duration::from_secs(301);
    m.handle_observation(present(1, "", "101"), 101, now);
    assert!(m.poll_action(now).is_some(), "no hold after a quiet spell");
    assert!(!m.status().contested);
}

#[test]
fn an_outcome_without_a_call_is_ignored() {
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(Observed::Absent, 1, t0);
    m.handle_outcome(Err(WriteError::blocked("x")), t0);
    assert_eq!(m.status().state, TierState::Pending);
    assert_eq!(m.poll_action(t0), Some(Action::Create(spec())));
}

#[test]
fn unknown_after_known_is_ignored() {
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(present(253, "desc", "1"), 1, t0);
    m.handle_observation(Observed::Unknown, 2, t0);
    assert!(m.is_converged());
    assert_eq!(m.observed(), &present(253, "desc", "1"));
}

#[test]
fn a_busy_tier_set_cannot_make_a_blocked_tier_spin() {
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(Observed::Absent, 1, t0);
    let _ = m.poll_action(t0);
    m.handle_outcome(Err(WriteError::blocked("denied")), t0);
    // Other Tiers change 10 ms later: the retry waits for the first backoff step.
    m.handle_observation(Observed::Absent, 2, t0 + 10 * MS);
    assert_eq!(m.poll_action(t0 + 10 * MS), None);
    assert_eq!(m.poll_timeout(), Some(t0 + 250 * MS));
    assert_eq!(m.poll_action(t0 + 250 * MS), Some(Action::Create(spec())));
}

#[test]
fn state_labels_are_listed() {
    let t0 = Instant::now();
    let states = [
        TierState::Pending,
        TierState::Converged,
        TierState::Retrying {
            attempt: 1,
            class: ErrorClass::Stale,
            error: String::new(),
        },
        TierState::Blocked {
            since: t0,
            attempt: 1,
            message: String::new(),
        },
        TierState::Contested {
            corrections: 1,
            until: t0,
        },
    ];
    let labels: Vec<&str> = states.iter().map(TierState::as_str).collect();
    assert_eq!(labels, TierState::LABELS);
}

#[test]
fn retrying_a_write_the_cache_never_showed_is_not_a_correction() {
    // The cache lags beyond the echo timeout: the machine writes again on the old version (a
    // harmless Conflict), which is a retry, not a correction of someone else's change.
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(present(1, "", "5"), 1, t0);
    assert!(m.poll_action(t0).is_some());
    m.handle_outcome(Ok(()), t0);
    let deadline = m.poll_timeout().unwrap();
    assert!(
        m.poll_action(deadline).is_some(),
        "retry after the echo timeout"
    );
    m.handle_outcome(Err(WriteError::stale("Conflict")), deadline);
    assert_eq!(m.status().corrections, 0);
    // The cache catches up with our write, then someone edits the Tier: that is a correction.
    m.handle_observation(present(253, "desc", "6"), 2, deadline + MS);
    assert!(m.is_converged());
    m.handle_observation(present(253, "edited", "7"), 3, deadline + 2 * MS);
    assert!(m.poll_action(deadline + 2 * MS).is_some());
    assert_eq!(m.status().corrections, 1);
}

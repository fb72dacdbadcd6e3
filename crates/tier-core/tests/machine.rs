//! The per-Tier state machine, stepped by hand: no runtime, no clock, time passed in.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use tier_core::{
    Action, Blocker, ErrorClass, MachineConfig, Observed, ObservedTier, TierEvent, TierMachine,
    TierSpec, TierState, WriteError,
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
        last_writer: None,
    })
}

fn machine() -> TierMachine {
    TierMachine::new(spec(), MachineConfig::default(), 1).unwrap()
}

/// A machine whose write budget never runs out: for tests of the retry rules alone.
fn unbudgeted() -> TierMachine {
    let mut config = MachineConfig::default();
    config.contest.burst = 1000;
    TierMachine::new(spec(), config, 1).unwrap()
}

const MS: Duration = Duration::from_millis(1);
const S: Duration = Duration::from_secs(1);

/// What a fleet does at `now`: fire the timers due, then ask for an action.
fn step(m: &mut TierMachine, now: Instant) -> Option<Action> {
    m.handle_timeout(now);
    m.poll_action(now)
}

fn events(m: &mut TierMachine) -> Vec<TierEvent> {
    std::iter::from_fn(|| m.poll_event()).collect()
}

fn squatter() -> Blocker {
    Blocker {
        tiers: vec!["team-a".into()],
        reason: "priority 253 is held by Tier team-a".into(),
    }
}

#[test]
fn waits_for_sync_then_creates_once() {
    let t0 = Instant::now();
    let mut m = machine();
    assert!(!m.is_in_flight());
    assert_eq!(step(&mut m, t0), None);
    m.handle_observation(Observed::Unknown, 0, t0);
    assert_eq!(step(&mut m, t0), None, "no action before sync");
    m.handle_observation(Observed::Absent, 1, t0);
    assert_eq!(step(&mut m, t0), Some(Action::Create(spec())));
    assert!(m.is_in_flight());
    assert_eq!(step(&mut m, t0), None, "one call in flight at most");
    m.handle_observation(Observed::Absent, 2, t0);
    assert_eq!(
        step(&mut m, t0),
        None,
        "observations do not start a second call"
    );
}

#[test]
fn waits_for_the_echo_of_a_write() {
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(Observed::Absent, 1, t0);
    let _ = step(&mut m, t0);
    m.handle_outcome(Ok(()), t0);
    // The cache still shows the pre-write state: no second create.
    m.handle_observation(Observed::Absent, 1, t0 + 100 * MS);
    assert_eq!(step(&mut m, t0 + 100 * MS), None);
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
    let _ = step(&mut m, t0);
    m.handle_outcome(Ok(()), t0);
    let deadline = m.poll_timeout().unwrap();
    assert_eq!(step(&mut m, deadline - MS), None);
    assert_eq!(step(&mut m, deadline), Some(Action::Create(spec())));
}

#[test]
fn transient_errors_back_off_with_jitter_and_retry_after() {
    let t0 = Instant::now();
    let mut m = unbudgeted();
    m.handle_observation(Observed::Absent, 1, t0);
    let mut now = t0;
    let mut waits = Vec::new();
    for attempt in 1..=8u32 {
        assert!(step(&mut m, now).is_some(), "attempt {attempt}");
        m.handle_outcome(Err(WriteError::transient("503")), now);
        let next = m.poll_timeout().unwrap();
        waits.push(next - now);
        assert_eq!(
            step(&mut m, next - MS),
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
    let _ = step(&mut m, now);
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
    let _ = step(&mut m, t0);
    m.handle_outcome(Err(WriteError::transient("timeout")), t0);
    m.handle_observation(present(253, "desc", "9"), 2, t0 + MS);
    assert!(m.is_converged());
    assert_eq!(m.poll_timeout(), None);
    // A later drift starts from attempt 1 again.
    m.handle_observation(present(1, "desc", "10"), 3, t0 + 2 * MS);
    let _ = step(&mut m, t0 + 2 * MS);
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
    let action = step(&mut m, t0);
    assert_eq!(
        action,
        Some(Action::Update {
            tier: spec(),
            resource_version: "5".into()
        })
    );
    m.handle_outcome(Err(WriteError::stale("Conflict")), t0);
    // Nothing changed: no hot loop, not even when another Tier changes.
    assert_eq!(step(&mut m, t0), None);
    m.handle_observation(present(1, "", "5"), 2, t0 + MS);
    assert_eq!(step(&mut m, t0 + MS), None);
    // This Tier changed: decide again at once, on the new version.
    m.handle_observation(present(2, "", "6"), 3, t0 + 2 * MS);
    assert_eq!(
        step(&mut m, t0 + 2 * MS),
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
    let _ = step(&mut m, t0);
    m.handle_outcome(Err(WriteError::stale("AlreadyExists")), t0);
    let fallback = m.poll_timeout().unwrap();
    assert_eq!(
        fallback - t0,
        Duration::from_secs(3),
        "the cache gets the echo timeout"
    );
    assert_eq!(step(&mut m, fallback), Some(Action::Create(spec())));
}

#[test]
fn a_create_the_cache_predicts_denied_is_never_sent_and_names_the_blocker() {
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(Observed::Absent, 1, t0);
    m.handle_blocker(Some(squatter()), t0);
    assert_eq!(step(&mut m, t0), None, "a doomed create");
    match m.status().state {
        TierState::Blocked {
            since,
            blockers,
            reason,
        } => {
            assert_eq!(since, t0);
            assert_eq!(blockers, ["team-a"]);
            assert_eq!(reason, "priority 253 is held by Tier team-a");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        m.status().to_string(),
        "baseline blocked: priority 253 is held by Tier team-a"
    );
    assert_eq!(
        m.poll_timeout(),
        None,
        "no timer: only the blocker's change wakes it"
    );
    // Unrelated changes of the set, for a long time: still nothing sent, one event.
    for i in 0..100u32 {
        let now = t0 + i * 100 * MS;
        m.handle_observation(Observed::Absent, 2 + u64::from(i), now);
        m.handle_blocker(Some(squatter()), now);
        assert_eq!(step(&mut m, now), None);
    }
    assert_eq!(
        events(&mut m),
        [TierEvent::Blocked {
            tier: "baseline".into(),
            blockers: vec!["team-a".into()],
            reason: "priority 253 is held by Tier team-a".into(),
        }]
    );
    // The blocker goes: create in the same step.
    let gone = t0 + 11 * S;
    m.handle_observation(Observed::Absent, 200, gone);
    m.handle_blocker(None, gone);
    assert_eq!(step(&mut m, gone), Some(Action::Create(spec())));
}

#[test]
fn a_new_blocker_starts_a_new_episode() {
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(Observed::Absent, 1, t0);
    m.handle_blocker(Some(squatter()), t0);
    assert_eq!(step(&mut m, t0), None);
    let other = Blocker {
        tiers: vec!["team-b".into()],
        reason: "priority 253 is held by Tier team-b".into(),
    };
    m.handle_blocker(Some(other.clone()), t0 + MS);
    let blocked: Vec<_> = events(&mut m)
        .into_iter()
        .filter(|e| matches!(e, TierEvent::Blocked { .. }))
        .collect();
    assert_eq!(blocked.len(), 2, "{blocked:?}");
    assert!(
        matches!(m.status().state, TierState::Blocked { ref reason, .. } if *reason == other.reason)
    );
}

#[test]
fn a_denial_the_cache_does_not_explain_retries_on_a_short_backoff() {
    // The webhook's cache lags ours: it still sees the blocker we saw go.
    let t0 = Instant::now();
    let mut m = unbudgeted();
    m.handle_observation(Observed::Absent, 1, t0);
    let mut now = t0;
    let mut waits = Vec::new();
    for attempt in 1..=6u32 {
        assert_eq!(step(&mut m, now), Some(Action::Create(spec())), "{attempt}");
        m.handle_outcome(Err(WriteError::denied("overlaps with existing Tier")), now);
        assert!(
            matches!(m.status().state, TierState::Denied { attempt: a, .. } if a == attempt),
            "{:?}",
            m.status().state
        );
        // Changes of other Tiers do not wake it: only time does.
        m.handle_observation(Observed::Absent, 1 + u64::from(attempt), now + MS);
        assert_eq!(m.poll_action(now + MS), None);
        let next = m.poll_timeout().unwrap();
        assert_eq!(step(&mut m, next - MS), None);
        waits.push(next - now);
        now = next;
    }
    // Fast while a lag can explain it, then the transient backoff (attempt 5: 4 s nominal,
    // attempt 6: 8 s).
    let nominal = [400u64, 800, 1000, 1000, 4000, 8000];
    for (wait, nominal) in waits.iter().zip(nominal) {
        let nominal = Duration::from_millis(nominal);
        assert!(*wait >= nominal / 2 && *wait <= nominal, "{waits:?}");
    }
    // One Denied event, once the denials persist; never a Blocked one.
    let evs = events(&mut m);
    assert_eq!(
        evs,
        [TierEvent::Denied {
            tier: "baseline".into(),
            message: "overlaps with existing Tier".into(),
            rule: None,
        }]
    );
}

#[test]
fn a_lost_create_denied_as_overlapping_itself_is_not_blocked() {
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(Observed::Absent, 1, t0);
    assert!(step(&mut m, t0).is_some());
    // The create was applied, but its answer was lost.
    m.handle_outcome(Err(WriteError::transient("connection reset")), t0);
    let retry = m.poll_timeout().unwrap();
    assert_eq!(step(&mut m, retry), Some(Action::Create(spec())));
    // Our cache still trails: the webhook denies the retry, the Tier it overlaps being itself.
    m.handle_outcome(
        Err(WriteError::denied("overlaps with existing Tier")),
        retry,
    );
    assert!(matches!(m.status().state, TierState::Denied { .. }));
    // No fast retry: it waits for the cache to show the Tier (at the latest the echo timeout).
    assert_eq!(m.poll_timeout(), Some(retry + 3 * S));
    m.handle_observation(Observed::Absent, 2, retry + 100 * MS);
    assert_eq!(step(&mut m, retry + 2 * S), None);
    // The next observation settles it.
    m.handle_observation(present(253, "desc", "3"), 2, retry + 300 * MS);
    assert!(m.is_converged());
    let evs = events(&mut m);
    assert!(evs.iter().all(|e| !e.is_warning()), "{evs:?}");
}

#[test]
fn forbidden_waits_for_its_own_backoff_whatever_the_set_does() {
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(Observed::Absent, 1, t0);
    let permission = "create resource \"tiers\" in API group \"crd.antrea.io\"".to_owned();
    let mut calls = Vec::new();
    let mut generation = 1;
    let mut now = t0;
    while now < t0 + 6 * S {
        if let Some(action) = step(&mut m, now) {
            calls.push(now);
            assert_eq!(action, Action::Create(spec()));
            let error = WriteError::forbidden("forbidden", Some(permission.clone()));
            m.handle_outcome(Err(error), now);
        }
        // Another controller touches a Tier every 100 ms.
        generation += 1;
        now += 100 * MS;
        m.handle_observation(Observed::Absent, generation, now);
        assert_eq!(m.poll_action(now), None, "a Tier change caused a retry");
    }
    assert!(calls.len() <= 4, "{calls:?}");
    match m.status().state {
        TierState::Forbidden {
            permission: p,
            attempt,
            ..
        } => {
            assert_eq!(p.as_deref(), Some(permission.as_str()));
            assert_eq!(attempt as usize, calls.len());
        }
        other => panic!("{other:?}"),
    }
    assert!(
        m.status()
            .to_string()
            .contains("tierd may not create resource")
    );
    let evs = events(&mut m);
    assert_eq!(evs.len(), 1, "one event per episode: {evs:?}");
}

#[test]
fn not_installed_retries_when_the_cache_lists_again_but_not_in_a_hot_loop() {
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(Observed::Absent, 1, t0);
    let _ = step(&mut m, t0);
    m.handle_outcome(Err(WriteError::not_installed("404")), t0);
    assert!(matches!(m.status().state, TierState::NotInstalled { .. }));
    assert_eq!(
        events(&mut m),
        [TierEvent::NotInstalled {
            tier: "baseline".into(),
            message: "404".into()
        }]
    );
    assert_eq!(m.poll_timeout(), Some(t0 + 10 * S));
    // The set changes 10 ms later: the retry waits for the first backoff step.
    m.handle_observation(Observed::Absent, 2, t0 + 10 * MS);
    assert_eq!(m.poll_action(t0 + 10 * MS), None);
    assert_eq!(m.poll_timeout(), Some(t0 + 250 * MS));
    assert_eq!(step(&mut m, t0 + 250 * MS - MS), None);
    assert_eq!(step(&mut m, t0 + 250 * MS), Some(Action::Create(spec())));
    // A set change after the first backoff step wakes it at once.
    m.handle_outcome(Err(WriteError::not_installed("404")), t0 + S);
    m.handle_observation(Observed::Absent, 3, t0 + 2 * S);
    assert_eq!(m.poll_action(t0 + 2 * S), Some(Action::Create(spec())));
    m.handle_outcome(Err(WriteError::not_installed("404")), t0 + 2 * S);
    assert_eq!(events(&mut m), [], "one event per episode");
}

#[test]
fn a_server_answer_ends_a_transient_wait_unless_it_asked_for_one() {
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(Observed::Absent, 1, t0);
    let _ = step(&mut m, t0);
    m.handle_outcome(Err(WriteError::transient("503")), t0);
    assert_eq!(m.poll_action(t0 + MS), None);
    m.handle_server_answered(t0 + MS);
    assert_eq!(m.poll_action(t0 + MS), Some(Action::Create(spec())));
    assert_eq!(m.status().outcomes.transient, 1);
    m.handle_outcome(
        Err(WriteError::transient("429").with_retry_after(5 * S)),
        t0 + 2 * MS,
    );
    m.handle_server_answered(t0 + 3 * MS);
    assert_eq!(m.poll_action(t0 + 3 * MS), None, "Retry-After stands");
    m.handle_outcome(Ok(()), t0 + 3 * MS);
    assert_eq!(m.status().outcomes.ok, 0, "no call was in flight");
    let _ = step(&mut m, t0 + 6 * S);
    m.handle_outcome(Ok(()), t0 + 6 * S);
    assert_eq!(m.status().outcomes.ok, 1);
    assert_eq!(m.status().outcomes.total(), 3);
}

#[test]
fn timers_fire_only_in_handle_timeout() {
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(Observed::Absent, 1, t0);
    let _ = step(&mut m, t0);
    m.handle_outcome(Err(WriteError::transient("503")), t0);
    let due = m.poll_timeout().unwrap();
    assert_eq!(
        m.poll_action(due + S),
        None,
        "poll_action does not fire timers"
    );
    m.handle_timeout(due);
    assert_eq!(m.poll_action(due), Some(Action::Create(spec())));
}

/// Converges `m` at `rv`, then shows it deleted at `now`.
fn delete_after_sync(m: &mut TierMachine, rv: u64, now: Instant) {
    m.handle_observation(present(253, "desc", &rv.to_string()), rv, now);
    assert!(m.is_converged());
    m.handle_observation(Observed::Absent, rv + 1, now);
}

#[test]
fn a_delete_fight_is_counted_contested_and_rate_limited() {
    let t0 = Instant::now();
    let mut m = machine();
    let mut now = t0;
    let mut rv = 1;
    let mut creates = Vec::new();
    m.handle_observation(Observed::Absent, rv, now);
    // Someone deletes the Tier 100 ms after every re-create, for 4 s.
    while now < t0 + 4 * S {
        if let Some(action) = step(&mut m, now) {
            assert_eq!(action, Action::Create(spec()));
            creates.push(now);
            m.handle_outcome(Ok(()), now);
            rv += 2;
            delete_after_sync(&mut m, rv, now + 100 * MS);
        }
        now += 10 * MS;
    }
    assert!(m.status().contested, "{:?}", m.status());
    // The first create and two immediate corrections (every write spends from the one
    // budget of three); then hold-offs of 1 s and 2 s.
    assert!(creates.len() <= 6, "{} creates in 4 s", creates.len());
    assert!(m.status().corrections >= 3, "deletions are corrections");
    let contested: Vec<_> = events(&mut m)
        .into_iter()
        .filter(|e| matches!(e, TierEvent::Contested { .. }))
        .collect();
    // When the fourth create is held, the server has confirmed two undone creates (the next
    // create passed each time; the third's deletion is only seen, and a deletion could be of
    // someone else's object): a deletion names no writer.
    assert_eq!(
        contested,
        [TierEvent::Contested {
            tier: "baseline".into(),
            streak: 2,
            by: None,
        }]
    );
}

#[test]
fn a_slow_editor_is_corrected_at_once_every_time_and_never_contested() {
    let t0 = Instant::now();
    let mut m = machine();
    let mut rv = 1;
    m.handle_observation(present(253, "desc", "1"), rv, t0);
    for round in 1..=20u32 {
        // A GitOps re-sync every 200 s sets the priority back.
        let edit = t0 + round * 200 * S;
        rv += 1;
        m.handle_timeout(edit);
        m.handle_observation(present(1, "desc", &rv.to_string()), rv, edit);
        let action = step(&mut m, edit);
        assert!(
            matches!(action, Some(Action::Update { .. })),
            "round {round}: {:?}",
            m.status()
        );
        m.handle_outcome(Ok(()), edit);
        rv += 1;
        m.handle_observation(present(253, "desc", &rv.to_string()), rv, edit + 50 * MS);
        assert!(!m.status().contested, "round {round}");
    }
    assert_eq!(m.status().corrections, 20);
}

#[test]
fn contested_clears_on_a_timer_after_the_quiet_period() {
    let t0 = Instant::now();
    let mut m = machine();
    let quiet = MachineConfig::default().contest.quiet();
    let mut now = t0;
    let mut rv = 1;
    m.handle_observation(present(253, "desc", "1"), rv, now);
    let mut fight = |m: &mut TierMachine, now: &mut Instant, rounds: usize| {
        let mut done = 0;
        while done < rounds {
            rv += 1;
            m.handle_observation(present(1, "", &rv.to_string()), rv, *now);
            loop {
                if let Some(action) = step(m, *now) {
                    assert!(matches!(action, Action::Update { .. }));
                    m.handle_outcome(Ok(()), *now);
                    rv += 1;
                    m.handle_observation(present(253, "desc", &rv.to_string()), rv, *now);
                    break;
                }
                *now = m.poll_timeout().unwrap();
            }
            done += 1;
            *now += 10 * MS;
        }
    };
    fight(&mut m, &mut now, 5);
    assert!(m.status().contested);
    let last = now;
    // The fight stops. The machine asks to be woken at the end of the quiet period...
    let wake = m.poll_timeout().expect("a timer ends the contest");
    assert!(wake <= last + quiet, "{:?}", wake - last);
    m.handle_timeout(wake - MS);
    assert!(m.status().contested);
    m.handle_timeout(wake);
    assert!(
        !m.status().contested,
        "cleared without a further correction"
    );
    let evs = events(&mut m);
    assert_eq!(
        evs.last(),
        Some(&TierEvent::ContestEnded {
            tier: "baseline".into()
        })
    );
    assert!(!evs.last().unwrap().is_warning());
    // A second fight reports its own streak, not the lifetime total.
    now = wake + S;
    fight(&mut m, &mut now, 5);
    let evs = events(&mut m);
    assert!(
        evs.contains(&TierEvent::Contested {
            tier: "baseline".into(),
            streak: 3,
            by: None,
        }),
        "{evs:?}"
    );
    assert_eq!(m.status().corrections, 10);
}

#[test]
fn a_hot_fight_gets_growing_hold_offs_up_to_the_cap() {
    let t0 = Instant::now();
    let mut m = machine();
    let mut now = t0;
    let mut rv = 0;
    let mut holds = Vec::new();
    m.handle_observation(present(253, "desc", "0"), 0, now);
    for _ in 0..15 {
        rv += 1;
        m.handle_observation(present(1, "", &rv.to_string()), rv, now);
        let action = match step(&mut m, now) {
            Some(action) => action,
            None => {
                let until = m.poll_timeout().unwrap();
                assert!(matches!(m.status().state, TierState::Contested { .. }));
                assert!(m.status().to_string().contains("contested"));
                holds.push(until - now);
                now = until;
                step(&mut m, now).unwrap()
            }
        };
        assert!(matches!(action, Action::Update { .. }));
        m.handle_outcome(Ok(()), now);
        rv += 1;
        m.handle_observation(present(253, "desc", &rv.to_string()), rv, now);
        now += 10 * MS;
    }
    assert_eq!(m.status().corrections, 15);
    assert!(holds.windows(2).all(|w| w[0] <= w[1]), "{holds:?}");
    assert_eq!(holds.first(), Some(&S));
    assert_eq!(holds.last(), Some(&Duration::from_secs(60)));
    // Three free corrections, then one per hold-off.
    assert_eq!(holds.len(), 12, "{holds:?}");
}

#[test]
fn drift_after_convergence_is_corrected_and_counted() {
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(present(253, "desc", "1"), 1, t0);
    assert!(m.is_converged());
    assert_eq!(step(&mut m, t0), None);
    m.handle_observation(present(253, "edited", "2"), 2, t0 + MS);
    assert_eq!(
        step(&mut m, t0 + MS),
        Some(Action::Update {
            tier: spec(),
            resource_version: "2".into()
        })
    );
    assert_eq!(
        m.status().corrections,
        1,
        "it had been in sync: a correction"
    );
    m.handle_outcome(Ok(()), t0 + MS);
    assert_eq!(
        events(&mut m),
        [TierEvent::Corrected {
            tier: "baseline".into(),
            fields: tier_core::Drift::of([("priority", false), ("description", true)]),
        }]
    );
    // A first write of a Tier never in sync is not a correction.
    let mut fresh = machine();
    fresh.handle_observation(present(1, "", "1"), 1, t0);
    assert!(step(&mut fresh, t0).is_some());
    assert_eq!(fresh.status().corrections, 0);
}

#[test]
fn an_outcome_without_a_call_is_ignored() {
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(Observed::Absent, 1, t0);
    m.handle_outcome(Err(WriteError::denied("x")), t0);
    assert_eq!(m.status().state, TierState::Pending);
    assert_eq!(step(&mut m, t0), Some(Action::Create(spec())));
}

#[test]
fn unknown_after_known_is_ignored() {
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(present(253, "desc", "1"), 1, t0);
    m.handle_observation(Observed::Unknown, 2, t0);
    assert!(m.is_converged());
    assert_eq!(m.observed(), &present(253, "desc", "1"));
    // And an unknown first observation keeps the machine waiting for sync.
    let mut fresh = machine();
    fresh.handle_observation(Observed::Unknown, 1, t0);
    assert_eq!(step(&mut fresh, t0), None);
    assert_eq!(fresh.status().state, TierState::Pending);
}

#[test]
fn state_labels_are_listed_and_rendered() {
    let t0 = Instant::now();
    let states = [
        TierState::Pending,
        TierState::Converged,
        TierState::Retrying {
            attempt: 1,
            class: ErrorClass::Stale,
            error: "e".into(),
        },
        TierState::Blocked {
            since: t0,
            blockers: vec!["a".into()],
            reason: "priority 1 is held by Tier a".into(),
        },
        TierState::Denied {
            since: t0,
            attempt: 2,
            message: "m".into(),
            rule: None,
        },
        TierState::Forbidden {
            since: t0,
            attempt: 1,
            permission: None,
            message: "m".into(),
        },
        TierState::NotInstalled {
            since: t0,
            attempt: 1,
            message: "m".into(),
        },
        TierState::Contested {
            streak: 4,
            until: t0,
            by: None,
        },
    ];
    let labels: Vec<&str> = states.iter().map(TierState::as_str).collect();
    assert_eq!(labels, TierState::LABELS);
    let rendered: Vec<String> = states.iter().map(ToString::to_string).collect();
    assert_eq!(rendered[0], "pending");
    assert_eq!(rendered[2], "retrying after 1 failed attempt (stale): e");
    assert_eq!(rendered[3], "blocked: priority 1 is held by Tier a");
    assert!(
        rendered[4].starts_with("denied after 2 failed attempts"),
        "{}",
        rendered[4]
    );
    assert_eq!(rendered[5], "forbidden after 1 failed attempt: m");
    assert_eq!(rendered[6], "not-installed after 1 failed attempt: m");
    assert_eq!(
        rendered[7],
        "contested: another writer undid tierd's accepted writes (4 times in a row); the next \
         correction is held off"
    );
}

#[test]
fn retrying_a_write_the_cache_never_showed_is_not_a_correction() {
    // The cache lags beyond the echo timeout: the machine writes again on the old version (a
    // harmless Conflict), which is a retry, not a correction of someone else's change.
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(present(1, "", "5"), 1, t0);
    assert!(step(&mut m, t0).is_some());
    m.handle_outcome(Ok(()), t0);
    let deadline = m.poll_timeout().unwrap();
    assert!(
        step(&mut m, deadline).is_some(),
        "retry after the echo timeout"
    );
    m.handle_outcome(Err(WriteError::stale("Conflict")), deadline);
    assert_eq!(m.status().corrections, 0);
    // The cache catches up with our write, then someone edits the Tier: that is a correction.
    m.handle_observation(present(253, "desc", "6"), 2, deadline + MS);
    assert!(m.is_converged());
    m.handle_observation(present(253, "edited", "7"), 3, deadline + 2 * MS);
    assert!(step(&mut m, deadline + 2 * MS).is_some());
    assert_eq!(m.status().corrections, 1);
}

#[test]
fn a_hold_outlasting_the_quiet_period_asks_for_no_past_timeout() {
    // Contested, a long quiet, then one more drift: the hold ends past the quiet deadline of
    // the last correction. The machine must not ask to be woken in the past meanwhile.
    let t0 = Instant::now();
    let mut m = machine();
    let mut now = t0;
    let mut rv = 1;
    m.handle_observation(present(253, "desc", "1"), rv, now);
    for _ in 0..8 {
        rv += 1;
        m.handle_observation(present(1, "", &rv.to_string()), rv, now);
        while step(&mut m, now).is_none() {
            now = m.poll_timeout().unwrap();
        }
        m.handle_outcome(Ok(()), now);
        rv += 1;
        m.handle_observation(present(253, "desc", &rv.to_string()), rv, now);
        now += 10 * MS;
    }
    assert!(m.status().contested);
    // While the budget refills, the machine asks to be woken when it is full, never in the
    // past; then the contest is over and the next drift is corrected at once.
    let mut wakes = 0;
    let end = now + 100 * S;
    while let Some(next) = m.poll_timeout() {
        assert!(next >= now, "a timeout in the past: the driver would spin");
        if next > end {
            break;
        }
        now = next;
        assert_eq!(step(&mut m, now), None);
        wakes += 1;
        assert!(wakes < 10);
    }
    assert!(!m.status().contested, "{:?}", m.status());
    now = end;
    rv += 1;
    m.handle_observation(present(1, "", &rv.to_string()), rv, now);
    assert!(step(&mut m, now).is_some(), "corrected at once");
}

#[test]
fn small_getters_say_what_they_mean() {
    assert_eq!(<Action>::Create(spec()).verb(), "create");
    let update: Action = Action::Update {
        tier: spec(),
        resource_version: "1".into(),
    };
    assert_eq!(update.verb(), "update");
    let counts = tier_core::OutcomeCounts {
        ok: 2,
        stale: 3,
        transient: 5,
        denied: 7,
        forbidden: 11,
        not_installed: 13,
    };
    assert_eq!(counts.failed(), 39);
    assert_eq!(counts.total(), 41);
    for (class, n) in ErrorClass::ALL.iter().zip([3, 5, 7, 11, 13]) {
        assert_eq!(counts.of(*class), n, "{class}");
    }
    let tier = || "t".to_owned();
    assert!(!TierEvent::Created { tier: tier() }.is_warning());
    assert!(
        !TierEvent::Corrected {
            tier: tier(),
            fields: tier_core::Drift::default()
        }
        .is_warning()
    );
    assert!(!TierEvent::ContestEnded { tier: tier() }.is_warning());
    assert!(
        TierEvent::Blocked {
            tier: tier(),
            blockers: vec![],
            reason: String::new()
        }
        .is_warning()
    );
    assert!(
        TierEvent::Contested {
            tier: tier(),
            streak: 3,
            by: None,
        }
        .is_warning()
    );
    assert!(
        TierEvent::Denied {
            tier: tier(),
            message: String::new(),
            rule: None,
        }
        .is_warning()
    );
}

#[test]
fn a_blocked_tier_that_turns_up_is_updated_whatever_the_stale_prediction() {
    // Driven by hand (a fleet would clear the prediction itself): the Tier appears with another
    // priority while the last prediction still names a blocker. A create prediction says
    // nothing about an update: update now.
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(Observed::Absent, 1, t0);
    assert!(m.wants_create());
    m.handle_blocker(Some(squatter()), t0);
    assert_eq!(step(&mut m, t0), None);
    m.handle_observation(present(1, "desc", "4"), 2, t0 + MS);
    assert!(!m.wants_create());
    assert_eq!(
        step(&mut m, t0 + MS),
        Some(Action::Update {
            tier: spec(),
            resource_version: "4".into()
        })
    );
}

#[test]
fn an_editor_every_thirty_seconds_is_corrected_at_once_every_time() {
    // Slower than one token per 20 s, faster than the 120 s quiet period: tokens must refill.
    let t0 = Instant::now();
    let mut m = machine();
    let mut rv = 1;
    m.handle_observation(present(253, "desc", "1"), rv, t0);
    for round in 1..=12u32 {
        let edit = t0 + round * 30 * S;
        rv += 1;
        m.handle_timeout(edit);
        m.handle_observation(present(1, "desc", &rv.to_string()), rv, edit);
        assert!(
            matches!(step(&mut m, edit), Some(Action::Update { .. })),
            "round {round}: {:?}",
            m.status()
        );
        m.handle_outcome(Ok(()), edit);
        rv += 1;
        m.handle_observation(present(253, "desc", &rv.to_string()), rv, edit + 50 * MS);
    }
    assert!(!m.status().contested);
    assert_eq!(m.status().corrections, 12);
}

#[test]
fn an_observation_during_a_call_never_starts_a_second_one() {
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(present(1, "", "1"), 1, t0);
    assert!(step(&mut m, t0).is_some());
    // Someone else puts it in sync, then drifts it, while our call is in flight.
    m.handle_observation(present(253, "desc", "2"), 2, t0 + MS);
    assert!(m.is_in_flight());
    m.handle_observation(present(2, "", "3"), 3, t0 + 2 * MS);
    assert_eq!(step(&mut m, t0 + 2 * MS), None, "a second call in flight");
    m.handle_outcome(Ok(()), t0 + 3 * MS);
    assert_eq!(m.status().outcomes.ok, 1);
}

#[test]
fn a_set_change_exactly_at_the_first_backoff_step_wakes_a_not_installed_tier() {
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(Observed::Absent, 1, t0);
    let _ = step(&mut m, t0);
    m.handle_outcome(Err(WriteError::not_installed("404")), t0);
    m.handle_observation(Observed::Absent, 2, t0 + 250 * MS);
    assert_eq!(m.poll_action(t0 + 250 * MS), Some(Action::Create(spec())));
}

#[test]
fn a_missed_echo_doubles_the_next_wait_and_a_self_denial_waits_for_the_cache() {
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(Observed::Absent, 1, t0);
    assert_eq!(step(&mut m, t0), Some(Action::Create(spec())));
    m.handle_outcome(Ok(()), t0);
    // The cache lags past the echo timeout: the fallback create goes out and meets the Tier
    // the first one created.
    let t1 = t0 + 3 * S;
    assert_eq!(step(&mut m, t1), Some(Action::Create(spec())));
    let overlap = "admission webhook \"tiervalidator.antrea.io\" denied the request: tier \
                   baseline priority 253 overlaps with existing Tier";
    m.handle_outcome(Err(WriteError::denied(overlap)), t1);
    assert!(
        !matches!(m.status().state, TierState::Blocked { .. }),
        "{:?}",
        m.status().state
    );
    // No fast denied retry: it waits for the cache, as long as the cache is known to lag.
    assert_eq!(m.poll_timeout(), Some(t1 + 6 * S));
    assert_eq!(step(&mut m, t1 + 6 * S - MS), None);
    m.handle_observation(present(253, "desc", "5"), 2, t1 + 4 * S);
    assert!(m.is_converged());
    assert!(events(&mut m).iter().all(|e| !e.is_warning()));
    // Someone edits it; the correction's echo now gets twice the echo timeout.
    let t2 = t1 + 10 * S;
    m.handle_observation(present(100, "desc", "6"), 3, t2);
    assert!(matches!(step(&mut m, t2), Some(Action::Update { .. })));
    m.handle_outcome(Ok(()), t2);
    assert_eq!(m.poll_timeout(), Some(t2 + 6 * S));
    assert_eq!(
        step(&mut m, t2 + 6 * S - MS),
        None,
        "no update from a stale basis"
    );
}

#[test]
fn a_stale_fallback_that_finds_the_cache_unchanged_lengthens_the_echo_wait() {
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(Observed::Absent, 1, t0);
    let _ = step(&mut m, t0);
    m.handle_outcome(Err(WriteError::stale("AlreadyExists")), t0);
    // The cache shows nothing for 3 s: it lags more than that.
    let t1 = t0 + 3 * S;
    assert_eq!(step(&mut m, t1), Some(Action::Create(spec())));
    m.handle_outcome(Ok(()), t1);
    assert_eq!(m.poll_timeout(), Some(t1 + 6 * S));
}

#[test]
fn an_echo_in_time_keeps_the_echo_wait() {
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(Observed::Absent, 1, t0);
    let _ = step(&mut m, t0);
    m.handle_outcome(Ok(()), t0);
    m.handle_observation(present(253, "desc", "5"), 2, t0 + 3 * S - MS);
    assert!(m.is_converged());
    let t1 = t0 + 10 * S;
    m.handle_observation(present(100, "desc", "6"), 3, t1);
    assert!(matches!(step(&mut m, t1), Some(Action::Update { .. })));
    m.handle_outcome(Ok(()), t1);
    assert_eq!(m.poll_timeout(), Some(t1 + 3 * S));
}

#[test]
fn the_learned_echo_wait_comes_back_down_when_the_lag_goes() {
    // One lag spike: the echo wait doubles to 6 s. Then the cache is fast again: echoes come
    // within 100 ms, and the wait returns to the 3 s echo timeout.
    let t0 = Instant::now();
    let mut m = machine();
    m.handle_observation(Observed::Absent, 1, t0);
    assert_eq!(step(&mut m, t0), Some(Action::Create(spec())));
    m.handle_outcome(Ok(()), t0);
    let t1 = t0 + 3 * S;
    assert_eq!(
        step(&mut m, t1),
        Some(Action::Create(spec())),
        "the fallback"
    );
    m.handle_outcome(Err(WriteError::stale("AlreadyExists")), t1);
    m.handle_observation(present(253, "desc", "2"), 2, t1 + S);
    assert!(m.is_converged());
    let mut rv = 2;
    let mut now = t1 + 100 * S;
    // Two quick echoes.
    for _ in 0..2 {
        rv += 1;
        m.handle_observation(present(1, "", &rv.to_string()), rv, now);
        assert!(matches!(step(&mut m, now), Some(Action::Update { .. })));
        m.handle_outcome(Ok(()), now);
        rv += 1;
        m.handle_observation(present(253, "desc", &rv.to_string()), rv, now + 100 * MS);
        assert!(m.is_converged());
        now += 100 * S;
    }
    // The next write's echo is awaited for the echo timeout again, not the 6 s of the spike.
    rv += 1;
    m.handle_observation(present(1, "", &rv.to_string()), rv, now);
    assert!(matches!(step(&mut m, now), Some(Action::Update { .. })));
    m.handle_outcome(Ok(()), now);
    assert_eq!(m.poll_timeout(), Some(now + 3 * S));
}

#[test]
fn a_contest_names_the_other_writer_where_the_object_tells_it() {
    let t0 = Instant::now();
    let mut m = machine();
    let by = tier_core::FieldWriter {
        manager: "kubectl-edit".into(),
        time: Some("2026-12-01T09:00:00Z".into()),
    };
    let edited = |rv: u64| {
        Observed::Present(ObservedTier {
            name: "baseline".into(),
            priority: 1,
            description: String::new(),
            resource_version: rv.to_string(),
            last_writer: Some(by.clone()),
        })
    };
    let mut rv = 1;
    let mut now = t0;
    m.handle_observation(present(253, "desc", "1"), rv, now);
    while !m.status().contested {
        rv += 1;
        m.handle_observation(edited(rv), rv, now);
        if let Some(action) = step(&mut m, now) {
            assert!(matches!(action, Action::Update { .. }));
            m.handle_outcome(Ok(()), now);
            rv += 1;
            m.handle_observation(present(253, "desc", &rv.to_string()), rv, now);
        }
        now += 10 * MS;
        assert!(now < t0 + 10 * S);
    }
    let contested = events(&mut m)
        .into_iter()
        .find(|e| matches!(e, TierEvent::Contested { .. }))
        .unwrap();
    assert!(
        matches!(&contested, TierEvent::Contested { by: Some(b), .. } if *b == by),
        "{contested:?}"
    );
    assert!(
        contested
            .to_string()
            .starts_with("another writer (kubectl-edit (at 2026-12-01T09:00:00Z)) undid tierd's"),
        "{contested}"
    );
    let status = m.status().to_string();
    assert!(status.contains("kubectl-edit"), "{status}");
}

#[test]
fn a_hold_that_ends_converged_buys_no_free_write_later() {
    // The budget is spent and a write is held; before the hold ends, the other writer puts
    // the Tier back. The served hold is settled: the next drift still needs the budget.
    let t0 = Instant::now();
    let mut m = machine();
    let mut now = t0;
    let mut rv = 1;
    m.handle_observation(present(253, "desc", "1"), rv, now);
    let drift = |m: &mut TierMachine, rv: &mut u64, now: Instant| {
        *rv += 1;
        m.handle_observation(present(1, "", &rv.to_string()), *rv, now);
    };
    for _ in 0..3 {
        drift(&mut m, &mut rv, now);
        assert!(step(&mut m, now).is_some());
        m.handle_outcome(Ok(()), now);
        rv += 1;
        m.handle_observation(present(253, "desc", &rv.to_string()), rv, now);
        now += 10 * MS;
    }
    drift(&mut m, &mut rv, now);
    assert_eq!(step(&mut m, now), None, "held");
    let until = m.poll_timeout().unwrap();
    // The hold ends; before the write goes, someone else puts the Tier back.
    m.handle_timeout(until);
    rv += 1;
    m.handle_observation(present(253, "desc", &rv.to_string()), rv, until);
    assert_eq!(m.poll_action(until), None);
    assert!(m.is_converged());
    // The next drift, a moment later, waits for the budget again.
    let later = until + 10 * MS;
    drift(&mut m, &mut rv, later);
    assert_eq!(
        step(&mut m, later),
        None,
        "no free write from a settled hold"
    );
}

#[test]
fn the_streak_restarts_once_the_budget_is_full_again() {
    // Two corrections, then a quiet minute (the bucket refills): a later fight's Contested
    // event counts only its own corrections.
    let t0 = Instant::now();
    let mut m = machine();
    let mut now = t0;
    let mut rv = 1;
    m.handle_observation(present(253, "desc", "1"), rv, now);
    let mut fight = |m: &mut TierMachine, now: &mut Instant, n: usize| {
        for _ in 0..n {
            rv += 1;
            m.handle_observation(present(1, "", &rv.to_string()), rv, *now);
            if step(m, *now).is_some() {
                m.handle_outcome(Ok(()), *now);
                rv += 1;
                m.handle_observation(present(253, "desc", &rv.to_string()), rv, *now);
            }
            *now += 10 * MS;
        }
    };
    fight(&mut m, &mut now, 2);
    now += 100 * S;
    m.handle_timeout(now);
    fight(&mut m, &mut now, 4);
    let contested: Vec<TierEvent> = events(&mut m)
        .into_iter()
        .filter(|e| matches!(e, TierEvent::Contested { .. }))
        .collect();
    assert_eq!(
        contested,
        [TierEvent::Contested {
            tier: "baseline".into(),
            streak: 3,
            by: None,
        }]
    );
}

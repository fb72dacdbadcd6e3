//! The decisions of [`Election`], stepped by hand with time passed in.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use kube::runtime::events::EventType;

const S: Duration = Duration::from_secs(1);

fn election(identity: &str) -> Election {
    Election::new(ElectionConfig::new("kube-system", "tierd", identity)).unwrap()
}

fn wall() -> Timestamp {
    Timestamp::UNIX_EPOCH
}

fn held_by(holder: &str, renewed: i64) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(holder.into()),
        lease_duration_seconds: Some(15),
        renew_time: Some(MicroTime(Timestamp::from_second(renewed).unwrap())),
        lease_transitions: Some(3),
        ..LeaseSpec::default()
    }
}

#[test]
fn an_absent_lease_is_created_and_permits_writes_for_the_renew_deadline_from_sending() {
    let t0 = Instant::now();
    let mut a = election("a");
    let Decision::Create(spec) = a.observe(None, t0, wall()) else {
        panic!("not a create");
    };
    assert_eq!(spec.holder_identity.as_deref(), Some("a"));
    assert_eq!(spec.lease_duration_seconds, Some(15));
    assert_eq!(spec.lease_transitions, Some(0));
    assert!(!a.may_write(t0), "nothing before the server confirms");
    // Sent at t0, confirmed a second later: the deadline counts from sending.
    a.confirmed(&spec, t0, t0 + S);
    assert!(a.may_write(t0 + S));
    assert!(a.may_write(t0 + 10 * S - Duration::from_millis(1)));
    assert!(!a.may_write(t0 + 10 * S), "fenced at the renew deadline");
    assert_eq!(a.fence_at(), Some(t0 + 10 * S));
}

#[test]
fn a_candidate_waits_the_lease_duration_from_its_own_observation_not_the_renew_time() {
    let t0 = Instant::now();
    let mut b = election("b");
    // The holder's clock is far behind (renewTime in 1970): skew does not shorten the wait.
    let lease = held_by("a", 0);
    assert_eq!(
        b.observe(Some(&lease), t0, wall()),
        Decision::Held { holder: "a".into() }
    );
    assert_eq!(
        b.observe(Some(&lease), t0 + 14 * S, wall()),
        Decision::Held { holder: "a".into() }
    );
    // A renewal seen at 14 s starts the wait again.
    let renewed = held_by("a", 1);
    assert!(matches!(
        b.observe(Some(&renewed), t0 + 14 * S, wall()),
        Decision::Held { .. }
    ));
    assert!(matches!(
        b.observe(Some(&renewed), t0 + 28 * S, wall()),
        Decision::Held { .. }
    ));
    let Decision::Update(spec) = b.observe(Some(&renewed), t0 + 29 * S, wall()) else {
        panic!("no takeover after the lease duration");
    };
    assert_eq!(spec.holder_identity.as_deref(), Some("b"));
    assert_eq!(spec.lease_transitions, Some(4), "a transition");
    assert_eq!(spec.acquire_time, Some(MicroTime(wall())));
    assert!(!b.may_write(t0 + 29 * S), "not before the server confirms");
}

#[test]
fn a_free_lease_is_taken_at_once() {
    let t0 = Instant::now();
    let mut b = election("b");
    let released = LeaseSpec {
        holder_identity: None,
        lease_duration_seconds: Some(1),
        lease_transitions: Some(2),
        ..LeaseSpec::default()
    };
    let Decision::Update(spec) = b.observe(Some(&released), t0, wall()) else {
        panic!("a free Lease waits");
    };
    assert_eq!(spec.lease_transitions, Some(3));
    let empty = LeaseSpec {
        holder_identity: Some(String::new()),
        ..LeaseSpec::default()
    };
    assert!(matches!(
        b.observe(Some(&empty), t0, wall()),
        Decision::Update(_)
    ));
}

#[test]
fn another_holder_seen_while_leading_stops_writes_at_once() {
    let t0 = Instant::now();
    let mut a = election("a");
    let Decision::Create(spec) = a.observe(None, t0, wall()) else {
        panic!();
    };
    a.confirmed(&spec, t0, t0);
    assert!(a.may_write(t0 + S));
    assert!(matches!(
        a.observe(Some(&held_by("b", 5)), t0 + S, wall()),
        Decision::Held { .. }
    ));
    assert!(!a.may_write(t0 + S));
    assert_eq!(a.fence_at(), None);
    assert_eq!(
        a.renewal(wall()),
        None,
        "no renewal of someone else's Lease"
    );
}

#[test]
fn its_own_lease_after_the_fence_is_renewed_not_waited_for() {
    let t0 = Instant::now();
    let mut a = election("a");
    let Decision::Create(spec) = a.observe(None, t0, wall()) else {
        panic!();
    };
    let stored = LeaseSpec {
        acquire_time: Some(MicroTime(Timestamp::from_second(7).unwrap())),
        ..spec
    };
    a.confirmed(&stored, t0, t0);
    let later = t0 + 12 * S;
    assert!(!a.may_write(later));
    let Decision::Update(renewal) = a.observe(Some(&stored), later, wall()) else {
        panic!("its own Lease is renewed");
    };
    assert_eq!(renewal.lease_transitions, Some(0), "no transition");
    assert_eq!(
        renewal.acquire_time, stored.acquire_time,
        "acquire time kept"
    );
    a.confirmed(&renewal, later, later);
    assert!(a.may_write(later));
}

#[test]
fn release_clears_the_holder_and_stops_writes_first() {
    let t0 = Instant::now();
    let mut a = election("a");
    let Decision::Create(spec) = a.observe(None, t0, wall()) else {
        panic!();
    };
    a.confirmed(&spec, t0, t0);
    let released = a.release(wall()).unwrap();
    assert!(!a.may_write(t0));
    assert_eq!(released.holder_identity, None);
    assert_eq!(released.lease_duration_seconds, Some(1));
    assert_eq!(released.lease_transitions, Some(0));
    let mut b = election("b");
    assert!(b.release(wall()).is_none(), "nothing to release");
    b.observe(Some(&held_by("a", 0)), t0, wall());
    assert!(b.release(wall()).is_none(), "not someone else's");
}

#[test]
fn the_lease_stores_whole_seconds_rounded_up() {
    let mut config = ElectionConfig::new("kube-system", "tierd", "a");
    config.lease_duration = Duration::from_millis(1500);
    config.renew_deadline = Duration::from_millis(1000);
    config.retry_period = Duration::from_millis(200);
    let mut a = Election::new(config).unwrap();
    let Decision::Create(spec) = a.observe(None, Instant::now(), wall()) else {
        panic!();
    };
    assert_eq!(spec.lease_duration_seconds, Some(2));
    // A Lease without a duration is waited for as long as this replica's own.
    let t0 = Instant::now();
    let mut b = election("b");
    let no_duration = LeaseSpec {
        holder_identity: Some("a".into()),
        ..LeaseSpec::default()
    };
    b.observe(Some(&no_duration), t0, wall());
    assert_eq!(b.expires_at(), Some(t0 + 15 * S));
}

#[test]
fn timing_that_cannot_fence_is_refused() {
    let config = |lease: u64, renew: u64, retry: u64| ElectionConfig {
        lease_duration: Duration::from_millis(lease),
        renew_deadline: Duration::from_millis(renew),
        retry_period: Duration::from_millis(retry),
        ..ElectionConfig::new("kube-system", "tierd", "a")
    };
    assert_eq!(
        ElectionConfig::new("kube-system", "tierd", "a").validate(),
        Ok(())
    );
    assert!(matches!(
        config(15_000, 15_000, 2000).validate(),
        Err(ElectionError::CannotFence { .. })
    ));
    assert!(matches!(
        config(15_000, 20_000, 2000).validate(),
        Err(ElectionError::CannotFence { .. })
    ));
    assert!(matches!(
        config(15_000, 10_000, 10_000).validate(),
        Err(ElectionError::RetryTooSlow { .. })
    ));
    assert!(matches!(
        config(15_000, 2400, 2000).validate(),
        Err(ElectionError::RetryTooSlow { .. })
    ));
    assert_eq!(config(15_000, 2401, 2000).validate(), Ok(()));
    assert!(matches!(
        config(500, 400, 100).validate(),
        Err(ElectionError::OutOfRange {
            field: "lease duration",
            ..
        })
    ));
    let message = config(15_000, 15_000, 2000)
        .validate()
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("must be shorter than the lease duration"),
        "{message}"
    );
    let mut unnamed = ElectionConfig::new("kube-system", "tierd", " ");
    assert_eq!(unnamed.validate(), Err(ElectionError::NoIdentity));
    unnamed.identity = "a".into();
    unnamed.name = "Not_A_Name".into();
    assert!(matches!(
        unnamed.validate(),
        Err(ElectionError::Name { what: "name", .. })
    ));
}

#[test]
fn statuses_and_events_in_words() {
    let status = LeaderStatus {
        lease: "kube-system/tierd".into(),
        identity: "tierd-0_ab".into(),
        leading: false,
        holder: Some("tierd-1_cd".into()),
        last_error: None,
    };
    assert_eq!(
        status.to_string(),
        "standby: Lease kube-system/tierd is held by tierd-1_cd; this replica (tierd-0_ab) \
         writes no Tier"
    );
    let leading = LeaderStatus {
        leading: true,
        holder: Some("tierd-0_ab".into()),
        ..status
    };
    assert_eq!(
        leading.to_string(),
        "leading: holds Lease kube-system/tierd as tierd-0_ab"
    );
    let event = crate::events::leader_election(&LeaderEvent::Lost {
        identity: "tierd-0_ab".into(),
        reason: "the Lease was not renewed within 10s".into(),
    });
    assert_eq!(event.type_, EventType::Warning);
    assert_eq!(event.reason, "LeaderElection");
    assert_eq!(
        event.note.as_deref(),
        Some("tierd-0_ab stopped leading: the Lease was not renewed within 10s")
    );
}

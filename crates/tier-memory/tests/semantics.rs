//! The API-server semantics of the write path, through the public API, on virtual time.

use std::time::Duration;

use tier_core::{ErrorClass, TierSpec, TierWriter, WriteError};
use tier_memory::{
    ANTREA_TIERS, Admission, ApiError, CallOutcome, MemoryCluster, RandomFaults, Verb, faults,
};
use tokio::time::Instant;

fn baseline() -> TierSpec {
    TierSpec::new(
        "baseline",
        253,
        "[READ-ONLY]: System generated Baseline Tier",
    )
}

const DENIED: &str = "admission webhook \"tiervalidator.antrea.io\" denied the request: ";

#[tokio::test(start_paused = true)]
async fn create_of_an_existing_tier_is_denied_by_admission_before_already_exists() {
    let cluster = MemoryCluster::builder().with_tier(baseline()).build();
    let err = cluster.create(&baseline()).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Denied);
    assert_eq!(
        err.message,
        format!("{DENIED}tier baseline priority 253 overlaps with existing Tier")
    );

    // Without the webhook, the store answers AlreadyExists.
    let plain = MemoryCluster::builder()
        .with_tier(baseline())
        .without_admission()
        .build();
    let err = plain.create(&baseline()).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Stale);
    assert_eq!(
        err.message,
        r#"tiers.crd.antrea.io "baseline" already exists"#
    );

    // With the webhook, AlreadyExists shows only when the priority is free.
    let moved = TierSpec::new("baseline", 7, "");
    let err = cluster.create(&moved).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Stale);
    assert!(err.message.ends_with("already exists"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn admission_denies_reserved_overlapping_and_too_many() {
    let cluster = MemoryCluster::new();
    let err = cluster
        .create(&TierSpec::new("x", 252, ""))
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::Denied);
    assert_eq!(
        err.message,
        format!("{DENIED}tier x priority 252 is reserved")
    );

    for p in 0..20 {
        cluster
            .create(&TierSpec::new(format!("t{p}"), p, ""))
            .await
            .unwrap();
    }
    let err = cluster
        .create(&TierSpec::new("y", 100, ""))
        .await
        .unwrap_err();
    assert_eq!(
        err.message,
        format!("{DENIED}maximum number of Tiers supported: 20")
    );
    assert_eq!(cluster.tiers().len(), 20);
}

#[tokio::test(start_paused = true)]
async fn updates_may_change_the_priority_and_check_the_resource_version() {
    let cluster = MemoryCluster::builder()
        .with_tier(TierSpec::new("baseline", 10, "old"))
        .with_tier(TierSpec::new("other", 253, ""))
        .build();
    let before = cluster.get("baseline").unwrap();
    assert_eq!(before.resource_version, "1");

    let err = cluster.update(&baseline(), "999").await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Stale);
    assert_eq!(
        err.message,
        "Operation cannot be fulfilled on tiers.crd.antrea.io \"baseline\": the object has been \
         modified; please apply your changes to the latest version and try again"
    );

    // The controller may move a Tier onto a priority another Tier holds: no overlap check.
    cluster.update(&baseline(), "1").await.unwrap();
    let after = cluster.get("baseline").unwrap();
    assert_eq!(
        (after.priority, after.resource_version.as_str()),
        (253, "3")
    );
    assert_eq!(after.description, baseline().description);

    let err = cluster.update(&baseline(), "1").await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Stale, "the old version is stale now");

    let err = cluster
        .update(&TierSpec::new("missing", 1, ""), "1")
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::Stale);
    assert_eq!(err.message, r#"tiers.crd.antrea.io "missing" not found"#);

    let err = cluster.update(&baseline(), "").await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Denied);
    assert!(
        err.message.contains("must be specified for an update"),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn every_write_bumps_the_global_resource_version_and_no_ops_do_not() {
    let cluster = MemoryCluster::new();
    assert_eq!(cluster.revision(), 0);
    cluster.create(&TierSpec::new("a", 1, "")).await.unwrap();
    cluster.create(&TierSpec::new("b", 2, "")).await.unwrap();
    assert_eq!(cluster.revision(), 2);
    assert_eq!(cluster.get("b").unwrap().resource_version, "2");

    // Same fields, current version: succeeds without a write.
    cluster
        .update(&TierSpec::new("a", 1, ""), "1")
        .await
        .unwrap();
    assert_eq!(cluster.revision(), 2);
    cluster
        .update(&TierSpec::new("a", 3, ""), "1")
        .await
        .unwrap();
    assert_eq!(cluster.get("a").unwrap().resource_version, "3");

    cluster.put_raw(&TierSpec::new("c", 4, "")).unwrap();
    cluster
        .edit("c", |t| t.description = "drift".into())
        .unwrap();
    cluster.delete("b").unwrap();
    assert_eq!(cluster.revision(), 6);
}

#[tokio::test(start_paused = true)]
async fn schema_violations_are_invalid_and_blocked() {
    let cluster = MemoryCluster::builder().without_admission().build();
    let err = cluster
        .create(&TierSpec::new("x", 256, ""))
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::Denied);
    assert!(err.message.contains("spec.priority"), "{err}");
    let raw = cluster
        .create_raw(&TierSpec::new("Bad", 1, ""))
        .unwrap_err();
    assert_eq!((raw.code(), raw.reason()), (422, "Invalid"));
}

#[tokio::test(start_paused = true)]
async fn other_actors_bypass_admission() {
    let cluster = MemoryCluster::builder().with_tier(baseline()).build();
    // A squatter at a system priority and a Tier at a reserved one: admission would deny both.
    cluster
        .create_raw(&TierSpec::new("squatter", 253, ""))
        .unwrap();
    cluster.create_raw(&TierSpec::new("odd", 254, "")).unwrap();
    assert_eq!(
        cluster.create_raw(&TierSpec::new("odd", 1, "")),
        Err(ApiError::AlreadyExists {
            resource: ANTREA_TIERS,
            name: "odd".into()
        })
    );
    let edited = cluster.edit("baseline", |t| {
        t.priority = 20;
        t.name = "renamed".into();
    });
    assert_eq!(edited.unwrap().name, "baseline");
    assert_eq!(cluster.get("baseline").unwrap().priority, 20);
    assert_eq!(cluster.delete("squatter").unwrap().priority, 253);
    assert_eq!(
        cluster.delete("squatter"),
        Err(ApiError::NotFound {
            resource: ANTREA_TIERS,
            name: "squatter".into()
        })
    );
    assert!(matches!(
        cluster.edit("nope", |_| {}),
        Err(ApiError::NotFound { .. })
    ));
    // None of this went through a writer.
    assert_eq!(cluster.calls().total(), 0);
}

#[tokio::test(start_paused = true)]
async fn an_unreachable_webhook_fails_writes_as_transient() {
    let cluster = MemoryCluster::builder()
        .with_tier(TierSpec::new("a", 1, ""))
        .build();
    cluster.set_webhook_reachable(false);
    let err = cluster.create(&baseline()).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Transient);
    assert!(
        err.message
            .contains("failed calling webhook \"tiervalidator.antrea.io\""),
        "{err}"
    );
    let err = cluster
        .update(&TierSpec::new("a", 2, ""), "1")
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::Transient);
    // Stale preconditions come before the webhook on update.
    let err = cluster
        .update(&TierSpec::new("a", 2, ""), "9")
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::Stale);
    cluster.set_webhook_reachable(true);
    cluster.create(&baseline()).await.unwrap();

    cluster.set_admission(None);
    cluster.set_webhook_reachable(false);
    cluster.create(&TierSpec::new("x", 254, "")).await.unwrap();
    cluster.set_admission(Some(Admission::antrea()));
}

#[tokio::test(start_paused = true)]
async fn scripted_failures_are_consumed_exactly_n_times() {
    let cluster = MemoryCluster::new();
    let unavailable = faults::unavailable().with_retry_after(Duration::from_secs(5));
    cluster
        .faults()
        .fail_next(Verb::Create, 2)
        .for_name("baseline")
        .with(unavailable.clone());
    assert_eq!(cluster.faults().pending(), 2);

    cluster
        .create(&TierSpec::new("other", 1, ""))
        .await
        .unwrap();
    assert_eq!(cluster.create(&baseline()).await, Err(unavailable.clone()));
    assert_eq!(cluster.create(&baseline()).await, Err(unavailable));
    assert!(
        cluster.get("baseline").is_none(),
        "a failed call changes nothing"
    );
    cluster.create(&baseline()).await.unwrap();
    assert_eq!(cluster.faults().pending(), 0);

    let calls = cluster.calls();
    assert_eq!(calls.count(Verb::Create), 4);
    assert_eq!(calls.count_for(Verb::Create, "baseline"), 3);
    assert_eq!(calls.failed_for(Verb::Create, "baseline"), 2);
    assert_eq!(calls.failed(Verb::Update), 0);
    assert_eq!(
        calls.records()[1].outcome,
        CallOutcome::Failed {
            error: faults::unavailable().with_retry_after(Duration::from_secs(5)),
            applied: false,
        }
    );
}

#[tokio::test(start_paused = true)]
async fn a_lost_response_applies_the_write() {
    let cluster = MemoryCluster::new();
    cluster
        .faults()
        .fail_next(Verb::Create, 1)
        .lose_response(faults::timeout());
    let err = cluster.create(&baseline()).await.unwrap_err();
    assert_eq!(err, faults::timeout());
    assert_eq!(cluster.get("baseline").unwrap().priority, 253);
    assert!(matches!(
        cluster.calls().records()[0].outcome,
        CallOutcome::Failed { applied: true, .. }
    ));
    // The retry meets the webhook first, as in Antrea's bug.
    let err = cluster.create(&baseline()).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Denied);
}

#[tokio::test(start_paused = true)]
async fn delays_run_on_virtual_time_and_hangs_are_cut_by_the_caller() {
    let cluster = MemoryCluster::new();
    cluster
        .faults()
        .fail_next(Verb::Create, 1)
        .delay(Duration::from_secs(4))
        .fail_next(Verb::Create, 1)
        .hang()
        .fail_next(Verb::Create, 1)
        .after(Duration::from_secs(1))
        .with(WriteError::denied("later"));

    let start = Instant::now();
    cluster.create(&TierSpec::new("a", 1, "")).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(4));

    let b = TierSpec::new("b", 2, "");
    let hung = tokio::time::timeout(Duration::from_secs(30), cluster.create(&b));
    assert!(hung.await.is_err(), "a hung call never answers");
    assert!(cluster.get("b").is_none());
    assert_eq!(cluster.calls().dropped(Verb::Create), 1);
    assert_eq!(
        cluster.calls().in_flight("b"),
        0,
        "a dropped call is no longer in flight"
    );

    let start = Instant::now();
    let err = cluster
        .create(&TierSpec::new("c", 3, ""))
        .await
        .unwrap_err();
    assert_eq!(
        (err.message.as_str(), start.elapsed()),
        ("later", Duration::from_secs(1))
    );
}

#[tokio::test(start_paused = true)]
async fn in_flight_calls_are_tracked_per_client_and_tier() {
    let cluster = MemoryCluster::new();
    cluster
        .faults()
        .fail_next(Verb::Create, 3)
        .delay(Duration::from_secs(1));
    let other = cluster.writer("other");
    let a = TierSpec::new("a", 1, "");
    let b = TierSpec::new("b", 2, "");
    let (one, two, three) = tokio::join!(cluster.create(&a), other.create(&a), cluster.create(&b));
    // Whichever lands second is denied as an overlap.
    let denied = [&one, &two]
        .into_iter()
        .filter_map(|r| r.as_ref().err())
        .collect::<Vec<_>>();
    assert_eq!(denied.len(), 1, "{one:?} {two:?}");
    assert_eq!(denied[0].class, ErrorClass::Denied);
    assert!(three.is_ok());
    let calls = cluster.calls();
    assert_eq!(calls.max_in_flight("a"), 1, "one call per client");
    assert_eq!(calls.max_concurrent("a"), 2, "two clients at once");
    assert_eq!(calls.peak_in_flight(), 1);
    assert_eq!(calls.for_client("other").total(), 1);
    assert_eq!(calls.for_client("other").max_concurrent("a"), 1);

    cluster.reset_calls();
    assert_eq!(cluster.calls().total(), 0);
    assert_eq!(cluster.calls().peak_in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn random_faults_replay_identically_from_a_seed() {
    async fn run(seed: u64) -> Vec<(String, CallOutcome, Duration)> {
        let cluster = MemoryCluster::builder().without_admission().build();
        cluster.faults().random(
            RandomFaults::new(seed)
                .failing(0.3)
                .losing_responses(0.2)
                .latency(Duration::from_millis(500)),
        );
        let start = std::time::Instant::from(Instant::now());
        for i in 0..40 {
            let _ = cluster.create(&TierSpec::new(format!("t{i}"), i, "")).await;
        }
        cluster
            .calls()
            .records()
            .iter()
            .map(|r| {
                let end = r.finished.unwrap() - start;
                (r.name.clone(), r.outcome.clone(), end)
            })
            .collect()
    }
    let a = run(42).await;
    assert_eq!(a, run(42).await);
    assert_ne!(a, run(43).await);
    assert!(
        a.iter()
            .any(|(_, o, _)| matches!(o, CallOutcome::Failed { applied: true, .. }))
    );
    assert!(
        a.iter()
            .any(|(_, o, _)| matches!(o, CallOutcome::Failed { applied: false, .. }))
    );
    assert!(a.iter().any(|(_, o, _)| *o == CallOutcome::Ok));
}

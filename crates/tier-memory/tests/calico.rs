//! The memory cluster serving Calico's Tiers: its schema, the protection of its built-ins, and
//! the real driver converging on it, with and without faults, on virtual time.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use tier_core::calico::{
    self, Calico, DEFAULT, DefaultAction, KUBE_ADMIN, KUBE_ADMIN_ORDER, KUBE_BASELINE, TierSpec,
};
use tier_core::{DesiredSet, DriverConfig, ErrorClass, Mode, Stopped, TierWriter};
use tier_memory::{
    ApiError, CALICO_TIERS, CacheConfig, CallOutcome, ClusterBuilder, MemoryCluster, RandomFaults,
    SyncMode, Verb,
};
use tokio::time::timeout;

fn converged(cluster: &MemoryCluster<Calico>) -> bool {
    DesiredSet::calico().tiers().iter().all(|want| {
        cluster
            .get(&want.name)
            .is_some_and(|t| calico::in_sync(want, &t))
    })
}

async fn run_once(cluster: &MemoryCluster<Calico>, config: DriverConfig<Calico>) -> Stopped {
    let run = tier_runtime::spawn(
        cluster.clone(),
        cluster.clone(),
        DesiredSet::calico(),
        config,
        Mode::Once,
    )
    .unwrap();
    timeout(Duration::from_secs(600), run.join()).await.unwrap()
}

#[tokio::test(start_paused = true)]
async fn an_empty_cluster_gets_the_three_built_ins_with_three_creates() {
    let cluster = MemoryCluster::calico();
    assert_eq!(
        run_once(&cluster, DriverConfig::default()).await,
        Stopped::Converged
    );
    assert!(converged(&cluster), "{:#?}", cluster.tiers());
    let calls = cluster.calls();
    assert_eq!((calls.count(Verb::Create), calls.total()), (3, 3));
}

#[tokio::test(start_paused = true)]
async fn a_built_in_cannot_be_written_with_other_values() {
    let cluster = MemoryCluster::calico();
    let wrong = TierSpec::new(KUBE_ADMIN, Some(5.0), DefaultAction::Pass);
    let err = cluster.create(&wrong).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Denied);
    assert_eq!(
        err.message,
        "Tier.projectcalico.org \"kube-admin\" is invalid: spec: Invalid value: 5: kube-admin \
         tier order must be 1000"
    );
    let right = TierSpec::new(KUBE_ADMIN, Some(KUBE_ADMIN_ORDER), DefaultAction::Pass);
    cluster.create(&right).await.unwrap();
    // Neither the port nor another actor may change a built-in to other values.
    let rv = cluster.get(KUBE_ADMIN).unwrap().resource_version;
    let deny = TierSpec::new(KUBE_ADMIN, Some(KUBE_ADMIN_ORDER), DefaultAction::Deny);
    let err = cluster.update(&deny, &rv).await.unwrap_err();
    assert!(
        err.message
            .ends_with("The 'kube-admin' tier must have default action 'Pass'"),
        "{err}"
    );
    assert!(matches!(
        cluster.edit(KUBE_ADMIN, |t| t.order = None),
        Err(ApiError::Invalid { .. })
    ));
    assert!(matches!(
        cluster.put_raw(&deny),
        Err(ApiError::Invalid { .. })
    ));
    assert_eq!(cluster.get(KUBE_ADMIN).unwrap().resource_version, rv);
}

#[tokio::test(start_paused = true)]
async fn built_ins_cannot_be_deleted_user_tiers_can() {
    let cluster = ClusterBuilder::<Calico>::default()
        .with_tiers(calico::built_ins())
        .build();
    for tier in calico::built_ins() {
        let err = cluster.delete(&tier.name).unwrap_err();
        assert_eq!(err.code(), 422);
        assert_eq!(
            err.to_string(),
            format!(
                "tiers.projectcalico.org \"{0}\" is forbidden: ValidatingAdmissionPolicy \
                 'protect-builtin-tiers.projectcalico.org' with binding \
                 'protect-builtin-tiers.projectcalico.org' denied request: The built-in tier \
                 {0} cannot be deleted",
                tier.name
            )
        );
    }
    assert_eq!(cluster.tiers().len(), 3);
    cluster
        .create_raw(&TierSpec::new("mine", Some(1.0), DefaultAction::Pass))
        .unwrap();
    assert!(cluster.delete("mine").is_ok());
    assert_eq!(
        cluster.delete("mine"),
        Err(ApiError::NotFound {
            resource: CALICO_TIERS,
            name: "mine".into()
        })
    );
    // Without the policy (an older install), a built-in can go.
    let bare = ClusterBuilder::<Calico>::default()
        .with_tiers(calico::built_ins())
        .without_admission()
        .build();
    assert!(bare.delete(DEFAULT).is_ok());
}

#[tokio::test(start_paused = true)]
async fn user_tiers_need_no_order_and_may_share_one() {
    let cluster = MemoryCluster::calico();
    for tier in [
        TierSpec::new("last", None, DefaultAction::Deny),
        TierSpec::new("a", Some(KUBE_ADMIN_ORDER), DefaultAction::Pass),
        TierSpec::new("b", Some(KUBE_ADMIN_ORDER), DefaultAction::Deny),
    ] {
        cluster.create(&tier).await.unwrap();
    }
    assert_eq!(cluster.get("last").unwrap().order, None);
    // No overlap rule: the built-in at that order is created too.
    assert_eq!(
        run_once(&cluster, DriverConfig::default()).await,
        Stopped::Converged
    );
    assert!(converged(&cluster));
    let err = cluster
        .create(&TierSpec::new("has.dot", None, DefaultAction::Deny))
        .await
        .unwrap_err();
    assert!(err.message.contains("RFC 1123 label"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn a_built_in_left_wrong_is_corrected_with_one_update() {
    // Seeded as etcd may hold it (an install from before the CRD's validation rules).
    let cluster = ClusterBuilder::<Calico>::default()
        .with_tiers(calico::built_ins())
        .with_tier(TierSpec::new(KUBE_BASELINE, Some(1.0), DefaultAction::Deny))
        .build();
    assert!(!converged(&cluster));
    assert_eq!(
        run_once(&cluster, DriverConfig::default()).await,
        Stopped::Converged
    );
    assert!(converged(&cluster));
    let calls = cluster.calls();
    assert_eq!((calls.count(Verb::Update), calls.total()), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn three_initializers_with_random_faults_and_lag_converge() {
    let cluster = MemoryCluster::calico();
    cluster.faults().random(
        RandomFaults::new(7)
            .failing(0.2)
            .losing_responses(0.1)
            .latency(Duration::from_millis(300))
            .retry_after(Duration::from_secs(1)),
    );
    let runs: Vec<_> = (0..3u64)
        .map(|i| {
            let cache = cluster.cache(
                CacheConfig::default()
                    .sync(SyncMode::After(Duration::from_millis(100 * i)))
                    .lag(Duration::from_millis(400 * i)),
            );
            let writer = cluster.writer(&format!("init-{i}"));
            let config = DriverConfig {
                seed: Some(7 ^ i),
                ..DriverConfig::default()
            };
            tier_runtime::spawn(cache, writer, DesiredSet::calico(), config, Mode::Once).unwrap()
        })
        .collect();
    for run in runs {
        let stopped = timeout(Duration::from_secs(600), run.join()).await;
        assert_eq!(stopped, Ok(Stopped::Converged));
    }
    assert!(converged(&cluster));
    let calls = cluster.calls();
    let records = calls.records();
    let applied_creates = records
        .iter()
        .filter(|r| {
            r.verb == Verb::Create
                && matches!(
                    r.outcome,
                    CallOutcome::Ok | CallOutcome::Failed { applied: true, .. }
                )
        })
        .count();
    assert_eq!(applied_creates, 3, "each built-in was created exactly once");
    assert!(
        records
            .iter()
            .any(|r| matches!(r.outcome, CallOutcome::Failed { .. })),
        "the faults fired"
    );
}

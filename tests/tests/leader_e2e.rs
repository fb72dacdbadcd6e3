//! Two real `tierd run --leader-elect` processes against a real kube-apiserver and etcd
//! (`tier-testcluster`), with the shipped RBAC (`deploy/base/rbac.yaml`,
//! `deploy/base/leader-election.yaml`) and tierd's service-account token: an empty cluster gets
//! exactly six writes; the standby corrects drift within the lease duration plus one retry
//! period of a SIGKILL of the leader; on SIGTERM the leader releases the Lease and the standby
//! takes over within one retry period.
//!
//! The timing is short (lease 3 s, renew deadline 2 s, retry 500 ms; or lease 10 s for the
//! release test, so that a takeover by expiry cannot pass for one by release). Each test polls
//! with 20 ms sleeps and fails after a deadline.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use tier_testcluster::TestCluster;
use tier_tests::{PATIENCE, Tierd, USER, antrea};

/// The lease duration, renew deadline and retry period of the failover test.
const LEASE: Duration = Duration::from_secs(3);
const RENEW: Duration = Duration::from_secs(2);
const RETRY: Duration = Duration::from_millis(500);

fn deploy(file: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn tiers(cluster: &TestCluster) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("crd.antrea.io", "v1beta1", "Tier");
    Api::all_with(cluster.client(), &ApiResource::from_gvk(&gvk))
}

/// A control plane with Antrea's Tier CRD and tierd's shipped RBAC; the kubeconfig of tierd's
/// service account.
async fn cluster() -> (TestCluster, PathBuf) {
    let cluster = TestCluster::start().await.unwrap();
    cluster.apply(&deploy("crd.yaml")).await.unwrap();
    cluster.apply(&deploy("base/rbac.yaml")).await.unwrap();
    cluster
        .apply(&deploy("base/leader-election.yaml"))
        .await
        .unwrap();
    let token = cluster.token("kube-system", "tierd").await.unwrap();
    let kubeconfig = cluster.write_token_kubeconfig("tierd", &token).unwrap();
    // The CRD is served, and RBAC (evaluated from an informer) lets tierd read Leases.
    let client = cluster.token_client(&token).await.unwrap();
    let leases: Api<Lease> = Api::namespaced(client, "kube-system");
    let deadline = Instant::now() + PATIENCE;
    while tiers(&cluster).list(&Default::default()).await.is_err()
        || leases.get_opt("tierd").await.is_err()
    {
        assert!(
            Instant::now() < deadline,
            "the CRD or the RBAC never took effect"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (cluster, kubeconfig)
}

/// `tierd run --leader-elect` as `pod`, with the given lease duration, renew deadline and retry
/// period.
async fn replica(kubeconfig: &std::path::Path, pod: &str, timing: [Duration; 3]) -> Tierd {
    let [lease, renew, retry] = timing.map(|d| format!("{}ms", d.as_millis()));
    Tierd::run_on(
        kubeconfig,
        None,
        &[
            "--leader-elect",
            "--pod-name",
            pod,
            "--leader-elect-resource-namespace",
            "kube-system",
            "--leader-elect-lease-duration",
            &lease,
            "--leader-elect-renew-deadline",
            &renew,
            "--leader-elect-retry-period",
            &retry,
        ],
        Some(USER),
    )
    .await
}

/// The value of the sample `name` (no labels) in `text`, or the sum of its labelled samples.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(&format!("{name} ")) || l.starts_with(&format!("{name}{{")))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

async fn leads(tierd: &Tierd) -> bool {
    let (code, text) = tierd.get("/metrics").await;
    code == 200 && metric(&text, "tierd_leader") == 1.0
}

async fn writes(tierd: &Tierd) -> f64 {
    metric(&tierd.get("/metrics").await.1, "tierd_tier_writes_total")
}

/// Waits until exactly one of `replicas` leads; its index.
async fn leader(replicas: &[&Tierd]) -> usize {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let mut leading = Vec::new();
        for (i, replica) in replicas.iter().enumerate() {
            if leads(replica).await {
                leading.push(i);
            }
        }
        assert!(leading.len() <= 1, "two leaders: {leading:?}");
        if let [one] = leading[..] {
            return one;
        }
        assert!(Instant::now() < deadline, "no leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether every one of Antrea's six Tiers is stored with its priority and description.
async fn converged(cluster: &TestCluster) -> bool {
    let Ok(list) = tiers(cluster).list(&Default::default()).await else {
        return false;
    };
    antrea().iter().all(|(name, priority, description)| {
        list.items.iter().any(|t| {
            t.metadata.name.as_deref() == Some(*name)
                && t.data["spec"]["priority"].as_i64() == Some(*priority)
                && t.data["spec"]["description"].as_str() == Some(*description)
        })
    })
}

async fn until_converged(cluster: &TestCluster) -> Duration {
    let start = Instant::now();
    while !converged(cluster).await {
        assert!(start.elapsed() < PATIENCE, "never converged");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    start.elapsed()
}

async fn kill(tierd: &Tierd) {
    let status = tokio::process::Command::new("kill")
        .args(["-KILL", &tierd.pid().to_string()])
        .status()
        .await
        .unwrap();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_cluster_gets_exactly_six_writes_from_two_replicas() {
    let (cluster, kubeconfig) = cluster().await;
    let timing = [
        Duration::from_secs(15),
        Duration::from_secs(10),
        Duration::from_secs(2),
    ];
    let (a, b) = tokio::join!(
        replica(&kubeconfig, "tierd-a", timing),
        replica(&kubeconfig, "tierd-b", timing)
    );
    until_converged(&cluster).await;
    // Let a late second writer show itself.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let total = writes(&a).await + writes(&b).await;
    assert_eq!(
        total, 6.0,
        "writes (creates and failed attempts) of both replicas"
    );
    let one = leader(&[&a, &b]).await;
    let (leader, standby) = if one == 0 { (&a, &b) } else { (&b, &a) };
    assert_eq!(writes(leader).await, 6.0, "{:?}", leader.logs());
    assert_eq!(writes(standby).await, 0.0, "{:?}", standby.logs());
    for tier in tiers(&cluster).list(&Default::default()).await.unwrap() {
        assert_eq!(
            tier.metadata.generation,
            Some(1),
            "{:?}",
            tier.metadata.name
        );
    }
    // Both Ready; the leadership in /readyz?verbose.
    for (replica, line) in [
        (leader, "[+]leader-election ok"),
        (
            standby,
            "[-]leader-election failed (informational): standby: Lease kube-system/tierd is held by tierd-",
        ),
    ] {
        let (code, body) = replica.get("/readyz?verbose").await;
        assert_eq!(code, 200, "{body}");
        assert!(body.contains(line), "{body}");
    }
    let lease: Api<Lease> = Api::namespaced(cluster.client(), "kube-system");
    let holder = lease
        .get("tierd")
        .await
        .unwrap()
        .spec
        .unwrap()
        .holder_identity
        .unwrap();
    let pod = if one == 0 { "tierd-a_" } else { "tierd-b_" };
    assert!(holder.starts_with(pod), "{holder}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standby_corrects_drift_within_lease_duration_and_retry_period_of_a_sigkill() {
    let (cluster, kubeconfig) = cluster().await;
    let timing = [LEASE, RENEW, RETRY];
    let a = replica(&kubeconfig, "tierd-a", timing).await;
    let b = replica(&kubeconfig, "tierd-b", timing).await;
    until_converged(&cluster).await;
    let (old, standby) = if leader(&[&a, &b]).await == 0 {
        (a, b)
    } else {
        (b, a)
    };
    kill(&old).await;
    let killed = Instant::now();
    // Drift the leader can no longer correct.
    let api = tiers(&cluster);
    let mut tier = api.get("application").await.unwrap();
    tier.data["spec"]["description"] = "moved by someone".into();
    api.replace("application", &Default::default(), &tier)
        .await
        .unwrap();
    until_converged(&cluster).await;
    let corrected = killed.elapsed();
    eprintln!("measured: drift corrected {corrected:?} after the SIGKILL of the leader");
    // Another second for the slowness of a shared CI machine (two processes, kube-apiserver).
    assert!(
        corrected <= LEASE + RETRY + Duration::from_secs(1),
        "corrected {corrected:?} after the SIGKILL: {:?}",
        standby.logs()
    );
    // Not before the killed leader's Lease could expire: it renewed at most a retry period
    // before the kill.
    assert!(
        corrected >= LEASE - RETRY,
        "corrected {corrected:?} after the SIGKILL, before the Lease expired"
    );
    assert!(leads(&standby).await);
    assert_eq!(
        writes(&standby).await,
        1.0,
        "one correction: {:?}",
        standby.logs()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sigterm_the_leader_releases_and_the_standby_takes_over_within_one_retry_period() {
    let (cluster, kubeconfig) = cluster().await;
    // A lease long enough that a takeover by expiry cannot pass for one by release.
    let retry = Duration::from_secs(1);
    let timing = [Duration::from_secs(10), Duration::from_secs(6), retry];
    let a = replica(&kubeconfig, "tierd-a", timing).await;
    let b = replica(&kubeconfig, "tierd-b", timing).await;
    until_converged(&cluster).await;
    let (mut old, standby) = if leader(&[&a, &b]).await == 0 {
        (a, b)
    } else {
        (b, a)
    };
    old.terminate().await;
    let status = old
        .wait(Duration::from_secs(5))
        .await
        .expect("no exit after SIGTERM");
    assert!(status.success(), "{status:?}: {:?}", old.logs());
    let released = Instant::now();
    loop {
        if leads(&standby).await {
            break;
        }
        assert!(
            released.elapsed() < Duration::from_secs(10),
            "no takeover: {:?}",
            standby.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = released.elapsed();
    eprintln!("measured: the standby took over {took:?} after the old leader exited");
    assert!(
        took <= retry + Duration::from_millis(500),
        "the standby took over {took:?} after the release: {:?}",
        standby.logs()
    );
    // The Events about the Lease tell both changes.
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(cluster.client(), "kube-system");
    let deadline = Instant::now() + PATIENCE;
    loop {
        let notes: Vec<String> = events
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("LeaderElection"))
            .filter_map(|e| e.note)
            .collect();
        let released = notes
            .iter()
            .any(|n| n.ends_with("stopped leading: released the Lease on shutdown"));
        let acquired = notes
            .iter()
            .filter(|n| n.ends_with("became leader"))
            .count()
            >= 2;
        if released && acquired {
            break;
        }
        assert!(Instant::now() < deadline, "{notes:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

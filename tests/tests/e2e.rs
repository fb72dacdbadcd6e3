//! The real `tierd` binary against the in-process test API server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use tier_tests::{Cluster, PATIENCE, Tierd, Tls, antrea};
use tier_testserver::{Fault, ServerConfig, Verb};

/// Seeds every Antrea Tier with a wrong priority or description, except `keep`.
fn seed_drifted(cluster: &Cluster) {
    cluster.seed(
        "baseline",
        253,
        Some("[READ-ONLY]: System generated Baseline Tier"),
    );
    cluster.seed("application", 249, Some("edited"));
    cluster.seed("platform", 200, None);
}

#[tokio::test]
async fn run_converges_an_empty_cluster_and_stops_on_sigterm() {
    let cluster = Cluster::antrea().await;
    let mut tierd = Tierd::run(&cluster, None, &[]).await;
    let ready = tierd.until_ok("/readyz").await;
    assert!(cluster.eventually(Cluster::has_antrea_tiers).await);
    let converged = tierd.started.elapsed();
    eprintln!("start-to-ready {ready:?}, start-to-converged (observed) {converged:?}");
    assert_eq!(cluster.server.requests().count(Verb::Create, None), 6);
    tierd.until_ok("/readyz/system-tiers").await;
    let (_, metrics) = tierd.get("/metrics").await;
    assert!(
        metrics.contains("tierd_tier_state{tier=\"baseline\",state=\"converged\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("tierd_system_tiers_initialized 1"),
        "{metrics}"
    );
    // Events: one Created per Tier (published from the event stream as they happen, so they
    // may trail the status by a few requests): wait for them, then check there are no more.
    let created = |c: &Cluster| {
        c.server
            .events()
            .iter()
            .filter(|e| e["reason"] == "Created")
            .count()
    };
    assert!(
        cluster.eventually(|c| created(c) >= 6).await,
        "{:?} {:?} {:?}",
        cluster.server.events(),
        cluster
            .server
            .requests()
            .records()
            .iter()
            .filter(|r| r.endpoint == tier_testserver::Endpoint::Events)
            .map(|r| (r.method.clone(), r.code))
            .collect::<Vec<_>>(),
        tierd.logs()
    );
    assert_eq!(created(&cluster), 6);

    let signalled = Instant::now();
    tierd.terminate().await;
    let status = tierd
        .wait(Duration::from_secs(2))
        .await
        .expect("exit after SIGTERM");
    assert!(
        signalled.elapsed() < Duration::from_secs(1),
        "{:?}",
        signalled.elapsed()
    );
    assert_eq!(status.code(), Some(0), "{:?}", tierd.logs());
}

#[tokio::test]
async fn ensure_corrects_drifted_tiers_with_one_write_each() {
    let cluster = Cluster::antrea().await;
    seed_drifted(&cluster);
    let done = cluster.tierd(&["ensure", "--timeout", "20s"]).await;
    assert_eq!(done.code(), 0, "{}", done.stderr);
    assert!(cluster.has_antrea_tiers());
    let log = cluster.server.requests();
    assert_eq!(
        log.count(Verb::Update, Some("baseline")),
        0,
        "in sync: untouched"
    );
    assert_eq!(log.count(Verb::Update, Some("application")), 1);
    assert_eq!(log.count(Verb::Update, Some("platform")), 1);
    assert_eq!(log.count(Verb::Create, None), 3);
    assert_eq!(log.count(Verb::Get, None), 0, "reads come from the cache");
}

#[tokio::test]
async fn a_squatter_blocks_networkops_only_and_readiness_names_it() {
    let cluster = Cluster::antrea().await;
    cluster.seed("team-a", 150, Some("a user's Tier"));
    let tierd = Tierd::run(&cluster, None, &["--ready-requires-tiers"]).await;
    let others_converged = cluster
        .eventually(|c| {
            antrea()
                .into_iter()
                .filter(|(n, _, _)| *n != "networkops")
                .all(|(n, p, d)| c.stored(n) == Some((p, Some(d.to_owned()))))
        })
        .await;
    assert!(others_converged);
    assert_eq!(cluster.stored("networkops"), None);
    let deadline = Instant::now() + PATIENCE;
    let verbose = loop {
        let (code, body) = tierd.get("/readyz?verbose").await;
        if body.contains("networkops blocked") || Instant::now() > deadline {
            break (code, body);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(verbose.0, 503, "{}", verbose.1);
    assert!(
        verbose.1.contains("[+]tier-cache-synced ok"),
        "{}",
        verbose.1
    );
    assert!(
        verbose.1.contains("[-]system-tiers failed:"),
        "{}",
        verbose.1
    );
    assert!(
        verbose
            .1
            .contains("networkops blocked: priority 150 is held by Tier team-a"),
        "{}",
        verbose.1
    );

    // No create was sent while the cache showed the squatter; its removal is all it waits for.
    assert_eq!(
        cluster
            .server
            .requests()
            .count(Verb::Create, Some("networkops")),
        0
    );
    let removed = Instant::now();
    cluster.server.store().delete("team-a").unwrap();
    tierd.until_ok("/readyz").await;
    let unblocked = removed.elapsed();
    eprintln!("squatter removed -> converged in {unblocked:?}");
    assert!(unblocked < Duration::from_secs(1), "{unblocked:?}");
    assert!(cluster.has_antrea_tiers());
}

#[tokio::test]
async fn an_api_outage_with_retry_after_is_ridden_out() {
    let cluster = Cluster::antrea().await;
    let outage = cluster
        .server
        .inject(Fault::unavailable(Verb::Create).forever().retry_after(1));
    let tierd = Tierd::run(&cluster, None, &[]).await;
    tierd.until_ok("/readyz").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let during = cluster.server.requests().count(Verb::Create, None);
    // Six Tiers, each at most once per second of Retry-After (plus the first attempt).
    assert!(
        (6..=30).contains(&during),
        "{during} creates during a 3 s outage"
    );
    cluster.server.remove_fault(outage);
    assert!(cluster.eventually(Cluster::has_antrea_tiers).await);
    drop(tierd);
}

#[tokio::test]
async fn a_single_replica_whose_webhook_needs_it_ready_does_not_deadlock() {
    let tls = Tls::new();
    // The API server reaches tierd's webhook only while tierd's /readyz answers 200.
    let cluster = Cluster::start(ServerConfig::default().user("alice-token", "alice")).await;
    let tierd = Tierd::run(&cluster, Some(&tls), &[]).await;
    tierd.serve_as_webhook(&cluster, &tls).await;
    // The webhook really reviews: a user's Tier at a system priority is denied by tierd.
    let squatter = tier_testserver::tier::tier("team-a", 150, None);
    let url = format!("{}/apis/crd.antrea.io/v1beta1/tiers", cluster.server.url());
    let (code, body) = tier_tests::post_json(&url, "alice-token", &squatter).await;
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("tier team-a priority 150 overlaps with existing Tier"),
        "{body}"
    );
    let reviews = cluster
        .server
        .requests()
        .count(Verb::Create, Some("team-a"));
    assert_eq!(reviews, 1);
    assert_eq!(cluster.stored("team-a"), None);
}

/// Without `--controller-user`, the webhook lets tierd's own identity (asked of the API server)
/// change priorities: its own corrections go through its own webhook. With the old hard-coded
/// default (`system:serviceaccount:kube-system:tierd`) this controller's correction was denied.
#[tokio::test]
async fn by_default_the_webhook_lets_tierds_own_identity_correct_priorities() {
    const ME: &str = "system:serviceaccount:platform:my-controller";
    let tls = Tls::new();
    let cluster = Cluster::start_as(ServerConfig::default().user("alice-token", "alice"), ME).await;
    let tierd = Tierd::run_with(&cluster, Some(&tls), &[], None).await;
    tierd.serve_as_webhook(&cluster, &tls).await;
    // Someone drifts a priority behind the webhook's back; tierd's correction is an UPDATE of
    // the priority, which the webhook allows only to the controller user.
    cluster
        .server
        .store()
        .modify("platform", |obj| obj["spec"]["priority"] = 7.into())
        .unwrap();
    assert!(
        cluster.eventually(Cluster::has_antrea_tiers).await,
        "{:?}",
        tierd.logs()
    );
    assert!(
        tierd.logs().iter().any(|line| line.contains(ME)),
        "tierd says whom the webhook lets through: {:?}",
        tierd.logs()
    );
    // Anyone else is still denied.
    let (code, body) = tier_tests::put_priority(&cluster, "alice-token", "platform", 9).await;
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("update to Tier priority is not allowed"),
        "{body}"
    );
}

#[tokio::test]
async fn sigterm_during_a_backoff_exits_at_once_and_writes_nothing_after() {
    let cluster = Cluster::antrea().await;
    cluster
        .server
        .inject(Fault::unavailable(Verb::Create).forever().retry_after(5));
    let mut tierd = Tierd::run(&cluster, None, &[]).await;
    assert!(
        cluster
            .eventually(|c| c.server.requests().count(Verb::Create, None) >= 6)
            .await
    );
    let signalled = Instant::now();
    tierd.terminate().await;
    let at_signal = cluster.server.requests().count(Verb::Create, None);
    let status = tierd.wait(Duration::from_secs(2)).await.expect("exit");
    assert!(signalled.elapsed() < Duration::from_secs(1));
    assert_eq!(status.code(), Some(0));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        cluster.server.requests().count(Verb::Create, None),
        at_signal
    );
}

/// A server too old for SelfSubjectReview cannot say who tierd is: without `--controller-user`
/// tierd exits 1 saying what to set, rather than guessing a user for its webhook; with it, it
/// runs.
#[tokio::test]
async fn without_self_subject_review_run_asks_for_the_controller_user() {
    let cluster = Cluster::start(ServerConfig::default().without_self_subject_review()).await;
    // Not fatal: tierd converges (creates need no identity) and says what UPDATEs wait for.
    let asking = Tierd::run_with(&cluster, None, &[], None).await;
    asking.until_ok("/readyz").await;
    assert!(cluster.eventually(Cluster::has_antrea_tiers).await);
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (code, body) = asking.get("/readyz/controller-identity?verbose").await;
        assert_eq!(code, 503, "{body}");
        if body.contains("does not support SelfSubjectReview") {
            assert!(body.contains("--controller-user"), "{body}");
            break;
        }
        assert!(Instant::now() < deadline, "{body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let told = Tierd::run(&cluster, None, &[]).await;
    told.until_ok("/readyz/controller-identity").await;
}

#[tokio::test]
async fn two_replicas_converge_without_lasting_errors() {
    let cluster = Cluster::antrea().await;
    seed_drifted(&cluster);
    let one = Tierd::run(&cluster, None, &["--ready-requires-tiers"]).await;
    let two = Tierd::run(&cluster, None, &["--ready-requires-tiers"]).await;
    one.until_ok("/readyz").await;
    two.until_ok("/readyz").await;
    assert!(cluster.has_antrea_tiers());
    let writes = || {
        let log = cluster.server.requests();
        log.count(Verb::Create, None) + log.count(Verb::Update, None)
    };
    let settled = writes();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(writes(), settled, "no writes once both converged");
    for tierd in [&one, &two] {
        let (_, metrics) = tierd.get("/metrics").await;
        assert!(metrics.contains("tierd_tiers_blocked 0"), "{metrics}");
        for (name, _, _) in antrea() {
            let line = format!("tierd_tier_state{{tier=\"{name}\",state=\"converged\"}} 1");
            assert!(metrics.contains(&line), "{line}: {metrics}");
        }
    }
}

#[tokio::test]
async fn ensure_timeout_names_the_blocked_tier_and_why() {
    let cluster = Cluster::antrea().await;
    cluster.seed("team-a", 150, None);
    let done = cluster.tierd(&["ensure", "--timeout", "2s"]).await;
    assert_eq!(done.code(), 1, "{}", done.stderr);
    assert!(
        done.stderr.contains("not every Tier converged within 2s"),
        "{}",
        done.stderr
    );
    assert!(
        done.stderr
            .contains("networkops blocked: priority 150 is held by Tier team-a"),
        "{}",
        done.stderr
    );
}

#[tokio::test]
async fn a_second_signal_exits_at_once() {
    use tokio::io::AsyncWriteExt;

    let cluster = Cluster::antrea().await;
    let mut tierd = Tierd::run(&cluster, None, &[]).await;
    tierd.until_ok("/readyz").await;
    // A request that never completes keeps the graceful drain waiting (up to its limit).
    let mut stuck = tokio::net::TcpStream::connect(tierd.addr).await.unwrap();
    stuck
        .write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    tierd.terminate().await;
    // Wait for the first signal to be handled (readiness fails, or the listener closes),
    // rather than for a guessed duration: only then is the next one a *second* signal.
    let deadline = Instant::now() + Duration::from_secs(5);
    while tierd.get("/readyz").await.0 == 200 {
        assert!(
            Instant::now() < deadline,
            "the first signal was never handled"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let second = Instant::now();
    tierd.terminate().await;
    let status = tierd.wait(Duration::from_secs(2)).await.expect("exit");
    assert!(
        second.elapsed() < Duration::from_millis(300),
        "{:?}",
        second.elapsed()
    );
    assert_eq!(status.code(), Some(1), "{:?}", tierd.logs());
    drop(stuck);
}

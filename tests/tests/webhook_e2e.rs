//! The real `tierd` binary as the cluster's Tier webhook: the test API server calls tierd's
//! `/validate/tier` over TLS (only while tierd is Ready) for every Tier write.
//!
//! The loops here poll a real process over loopback with a bounded deadline ([`PATIENCE`]): the
//! state they wait for (tierd's caches catching up) is driven by real I/O, not by a clock.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use tier_tests::{Cluster, PATIENCE, Tierd, Tls};
use tier_testserver::policies::policy;
use tier_testserver::{PolicyResource, ServerConfig};

const ALICE: &str = "alice-token";
const ACNP: PolicyResource = PolicyResource::ClusterNetworkPolicies;
const ANNP: PolicyResource = PolicyResource::NetworkPolicies;

/// A cluster whose Tier writes are reviewed by a freshly started tierd, once tierd is Ready and
/// has converged Antrea's Tiers. `prepare` runs before tierd starts.
async fn cluster_with_tierd(prepare: impl FnOnce(&Cluster)) -> (Cluster, Tierd) {
    let tls = Tls::new();
    let cluster = Cluster::start(ServerConfig::default().user(ALICE, "alice")).await;
    prepare(&cluster);
    let tierd = Tierd::run(&cluster, Some(&tls), &[]).await;
    tierd.serve_as_webhook(&cluster, &tls).await;
    (cluster, tierd)
}

fn tiers_url(cluster: &Cluster) -> String {
    format!("{}/apis/crd.antrea.io/v1beta1/tiers", cluster.server.url())
}

/// Alice creates a Tier through the API server (and so through tierd's webhook).
async fn create(cluster: &Cluster, name: &str, priority: i64) -> (u16, String) {
    let tier = tier_testserver::tier::tier(name, priority, None);
    tier_tests::post_json(&tiers_url(cluster), ALICE, &tier).await
}

/// Alice deletes a Tier through the API server.
async fn delete(cluster: &Cluster, name: &str) -> (u16, String) {
    tier_tests::delete(&format!("{}/{name}", tiers_url(cluster)), ALICE).await
}

/// Retries `delete` until it answers 200, within [`PATIENCE`]; the last answer otherwise.
async fn delete_eventually(cluster: &Cluster, name: &str) -> (u16, String) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let answer = delete(cluster, name).await;
        if answer.0 == 200 || Instant::now() > deadline {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_tier_a_policy_references_cannot_be_deleted_until_the_policy_is_gone() {
    let (cluster, tierd) = cluster_with_tierd(|c| {
        c.seed("team-a", 10, None);
        c.seed("team-b", 11, None);
        let policies = c.server.store().policies();
        policies
            .create(ACNP, policy(ACNP, None, "deny-all", "team-a"))
            .unwrap();
        policies
            .create(ANNP, policy(ANNP, Some("dev"), "allow-web", "team-b"))
            .unwrap();
        policies
            .create(ANNP, policy(ANNP, Some("prod"), "allow-web", "team-b"))
            .unwrap();
    })
    .await;
    tierd.until_ok("/readyz/acnp-cache-synced").await;
    tierd.until_ok("/readyz/annp-cache-synced").await;
    let (_, verbose) = tierd.get("/readyz?verbose").await;
    assert!(
        verbose.contains("[+]acnp-cache-synced ok (informational)"),
        "{verbose}"
    );

    let (code, body) = delete(&cluster, "team-a").await;
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("tier team-a is referenced by 1 Antrea ClusterNetworkPolicies"),
        "{body}"
    );
    let (code, body) = delete(&cluster, "team-b").await;
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("tier team-b is referenced by 2 Antrea NetworkPolicies"),
        "{body}"
    );
    let (code, body) = delete(&cluster, "emergency").await;
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("cannot delete reserved tier emergency"),
        "{body}"
    );
    assert!(cluster.stored("team-a").is_some() && cluster.stored("team-b").is_some());

    // The policies go; once tierd's caches see it, the Tiers can go too.
    let policies = cluster.server.store().policies();
    policies.delete(ACNP, None, "deny-all").unwrap();
    let (code, body) = delete_eventually(&cluster, "team-a").await;
    assert_eq!(code, 200, "{body}");
    policies.delete(ANNP, Some("dev"), "allow-web").unwrap();
    let (code, body) = delete(&cluster, "team-b").await;
    // One NetworkPolicy still names it (unless tierd has not seen the first delete yet).
    assert_eq!(code, 400, "{body}");
    policies.delete(ANNP, Some("prod"), "allow-web").unwrap();
    let (code, body) = delete_eventually(&cluster, "team-b").await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(cluster.stored("team-a"), None);
    assert_eq!(cluster.stored("team-b"), None);
}

#[tokio::test]
async fn without_either_policy_crd_tierd_converges_and_serves_creates_and_deletes() {
    let (cluster, tierd) = cluster_with_tierd(|c| {
        let policies = c.server.store().policies();
        policies.uninstall(ACNP);
        policies.uninstall(ANNP);
    })
    .await;
    tierd.until_ok("/readyz/acnp-cache-synced").await;
    tierd.until_ok("/readyz/annp-cache-synced").await;
    let (code, body) = create(&cluster, "team-a", 10).await;
    assert_eq!(code, 201, "{body}");
    let (code, body) = delete(&cluster, "team-a").await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(cluster.stored("team-a"), None);
    let logs = tierd.logs().join("\n");
    assert!(logs.contains("is not installed"), "{logs}");
}

#[tokio::test]
async fn two_concurrent_user_creates_at_one_priority_exactly_one_passes() {
    let (cluster, _tierd) = cluster_with_tierd(|_| {}).await;
    let cluster = std::sync::Arc::new(cluster);
    for trial in 0..30 {
        let priority = 10 + trial;
        let racers = ["a", "b"].map(|who| {
            let cluster = cluster.clone();
            tokio::spawn(
                async move { create(&cluster, &format!("t{trial}-{who}"), priority).await },
            )
        });
        let mut created = Vec::new();
        for racer in racers {
            let (code, body) = racer.await.unwrap();
            match code {
                201 => created.push(body),
                // The loser meets the winner in the cache, or its reservation.
                400 => assert!(
                    body.contains(&format!("priority {priority} overlaps with existing Tier"))
                        || body.contains(&format!("priority {priority} is reserved by a create")),
                    "{body}"
                ),
                other => panic!("trial {trial}: {other} {body}"),
            }
        }
        assert_eq!(created.len(), 1, "trial {trial}: {created:?}");
        // Keep the number of distinct priorities well under Antrea's 20: the winner goes again
        // (its reservation ended when the cache showed it; a DELETE review never ends one).
        for who in ["a", "b"] {
            let name = format!("t{trial}-{who}");
            if cluster.stored(&name).is_some() {
                let (code, body) = delete(&cluster, &name).await;
                assert_eq!(code, 200, "{body}");
            }
        }
    }
}

#[tokio::test]
async fn feature_gates_are_input_checked_before_any_request() {
    let cluster = Cluster::antrea().await;
    let unknown = cluster
        .tierd(&[
            "plan",
            "--feature-gates",
            "ClusterNetworkPolicy=true,Nope=true",
        ])
        .await;
    assert_eq!(unknown.code(), 2, "{}", unknown.stderr);
    assert!(
        unknown.stderr.contains("unrecognized feature gate: Nope"),
        "{}",
        unknown.stderr
    );
    let file = tier_tests::TempFile::with(
        "tiers-220",
        "yaml",
        "tiers:\n  - name: admin\n    priority: 220\n",
    );
    let path = file.0.to_str().unwrap();
    let gated = cluster
        .tierd(&[
            "ensure",
            "--tiers",
            path,
            "--feature-gates",
            "ClusterNetworkPolicy=true",
        ])
        .await;
    assert_eq!(gated.code(), 2, "{}", gated.stderr);
    assert!(
        gated
            .stderr
            .contains("tiers[0] (admin): spec.priority: Invalid value: 220: is reserved for upstream ClusterNetworkPolicy"),
        "{}",
        gated.stderr
    );
    assert!(cluster.server.requests().is_empty(), "no request was sent");
}

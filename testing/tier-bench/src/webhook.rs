//! Webhook admission latency and throughput over loopback TLS: with empty policy caches, and
//! with the policy caches holding 10,000 policies (DELETE reviews look them up).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use tier_core::admission::AdmissionPolicy;
use tier_core::{DesiredSet, TierLister};
use tier_kube::policies::{ClusterNetworkPolicies, NetworkPolicies, PolicyCache, PolicyRef};
use tier_memory::MemoryCluster;
use tier_server::readiness::{ACNP_CACHE_SYNCED, ANNP_CACHE_SYNCED, TIER_CACHE_SYNCED, from_fn};
use tier_server::readiness::{CheckState, Readiness};
use tier_server::server::{Routes, Server};
use tier_server::tls::{CertFiles, CertReloader};
use tier_server::webhook::{PolicyReferences, Webhook};
use tier_tests::Tls;

use crate::quantile;

/// Concurrent clients.
const CONCURRENCY: usize = 16;

/// Policies in the caches of the second scenario: half ClusterNetworkPolicies, half
/// NetworkPolicies over 100 namespaces, spread over 50 Tier names.
pub const POLICIES: usize = 10_000;

/// Request `i` of the mix: every third a CREATE of a new Tier, then a CREATE overlapping a
/// system Tier, then an UPDATE; with `deletes`, every fourth is a DELETE of a Tier that policies
/// reference (or not).
fn review(i: usize, deletes: bool) -> Value {
    let (operation, name, priority) = match i % if deletes { 4 } else { 3 } {
        0 => ("CREATE", format!("user-{i}"), 120 + (i % 20) as i64),
        1 => ("CREATE", "mine".to_owned(), 150),
        2 => ("UPDATE", "baseline".to_owned(), 253),
        _ => ("DELETE", format!("tier-{}", i % 60), 10),
    };
    let object = json!({
        "apiVersion": "crd.antrea.io/v1beta1", "kind": "Tier",
        "metadata": {"name": name, "resourceVersion": "7"},
        "spec": {"priority": priority, "description": "d"},
    });
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": format!("00000000-0000-0000-0000-{i:012}"),
            "kind": {"group": "crd.antrea.io", "version": "v1beta1", "kind": "Tier"},
            "resource": {"group": "crd.antrea.io", "version": "v1beta1", "resource": "tiers"},
            "name": name,
            "operation": operation,
            "userInfo": {"username": "alice"},
            "object": if operation == "DELETE" { Value::Null } else { object.clone() },
            "oldObject": if operation == "CREATE" { Value::Null } else { object.clone() },
        }
    })
}

/// The policy caches of the second scenario.
pub fn policy_caches(
    n: usize,
) -> (
    PolicyCache<ClusterNetworkPolicies>,
    PolicyCache<NetworkPolicies>,
) {
    let acnps = PolicyCache::from_policies(
        (0..n / 2).map(|i| PolicyRef::new(None, &format!("acnp-{i}"), Some(&tier_of(i)))),
    );
    let annps = PolicyCache::from_policies((0..n - n / 2).map(|i| {
        PolicyRef::new(
            Some(&format!("ns-{}", i % 100)),
            &format!("annp-{i}"),
            Some(&tier_of(i)),
        )
    }));
    (acnps, annps)
}

fn tier_of(i: usize) -> String {
    format!("tier-{}", i % 50)
}

/// Table 4: the webhook without policies, then with [`POLICIES`] in its caches.
pub async fn latency(requests: usize) {
    println!(
        "4. Webhook /validate/tier over loopback TLS ({requests} AdmissionReviews per row, {CONCURRENCY} concurrent keep-alive clients, mix of allowed and denied reviews)\n"
    );
    println!("| policy caches | mix | p50 (µs) | p99 (µs) | max (µs) | throughput (reviews/s) |");
    println!("|---|---|---|---|---|---|");
    let empty = policy_caches(0);
    measure(requests, empty, false, "empty").await;
    let full = policy_caches(POLICIES);
    measure(requests, full, true, "10,000 policies").await;
    println!();
}

async fn measure(
    requests: usize,
    (acnps, annps): (
        PolicyCache<ClusterNetworkPolicies>,
        PolicyCache<NetworkPolicies>,
    ),
    deletes: bool,
    label: &str,
) {
    // A synced cache holding the six system Tiers.
    let cluster = MemoryCluster::builder()
        .with_tiers(DesiredSet::antrea().tiers().to_vec())
        .build();
    let lister: Arc<dyn TierLister> = Arc::new(cluster.lister());
    let readiness = Readiness::new();
    readiness
        .register(TIER_CACHE_SYNCED, from_fn(|| CheckState::Ok))
        .register(ACNP_CACHE_SYNCED, from_fn(|| CheckState::Ok))
        .register(ANNP_CACHE_SYNCED, from_fn(|| CheckState::Ok));
    let webhook = Webhook::new(lister, AdmissionPolicy::antrea("tierd"), &readiness)
        .policy_references(PolicyReferences::new(Arc::new(acnps), Arc::new(annps)));
    let router = Routes::new(readiness).webhook(webhook).into_router();
    let tls = Tls::new();
    let reloader = CertReloader::load(CertFiles::new(&tls.cert.0, &tls.key.0))
        .await
        .unwrap();
    let listener = tier_server::server::bind(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let server = Server::new(router).tls(reloader.server_config().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(server.serve(listener, async {
        let _ = stopped.await;
    }));

    let config = tls.client_config();
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_only()
        .enable_http1()
        .build();
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(https);
    let url = format!("https://{addr}/validate/tier");
    let bodies: Arc<Vec<Bytes>> = Arc::new(
        (0..requests)
            .map(|i| Bytes::from(review(i, deletes).to_string()))
            .collect(),
    );

    // Warm-up: establish the pooled connections.
    let send = |client: Client<_, Full<Bytes>>, body: Bytes, url: String| async move {
        let request = hyper::Request::post(url)
            .header("content-type", "application/json")
            .body(Full::new(body))
            .unwrap();
        let response = client.request(request).await.unwrap();
        assert_eq!(response.status(), 200);
        let _ = response.into_body().collect().await.unwrap();
    };
    for i in 0..CONCURRENCY * 4 {
        send(
            client.clone(),
            bodies[i % bodies.len()].clone(),
            url.clone(),
        )
        .await;
    }

    let started = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..CONCURRENCY {
        let (client, bodies, url) = (client.clone(), bodies.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut i = worker;
            while i < bodies.len() {
                let t = Instant::now();
                send(client.clone(), bodies[i].clone(), url.clone()).await;
                latencies.push(t.elapsed().as_secs_f64() * 1e6);
                i += CONCURRENCY;
            }
            latencies
        }));
    }
    let mut all = Vec::with_capacity(requests);
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    let elapsed = started.elapsed();
    all.sort_by(f64::total_cmp);
    let mix = if deletes {
        "CREATE/UPDATE/DELETE"
    } else {
        "CREATE/UPDATE"
    };
    println!(
        "| {label} | {mix} | {:.0} | {:.0} | {:.0} | {:.0} |",
        quantile(&all, 0.5),
        quantile(&all, 0.99),
        quantile(&all, 1.0),
        requests as f64 / elapsed.as_secs_f64().max(f64::EPSILON)
    );
    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(2), served).await;
}

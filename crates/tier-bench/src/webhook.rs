//! Webhook admission latency and throughput over loopback TLS.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use tier_core::admission::AdmissionPolicy;
use tier_core::{DesiredSet, TierLister};
use tier_memory::MemoryCluster;
use tier_server::readiness::{TIER_CACHE_SYNCED, from_fn};
use tier_server::tls::{CertFiles, CertReloader};
use tier_server::{CheckState, Readiness, Routes, Server, Webhook};
use tier_tests::Tls;

use crate::quantile;

/// Concurrent clients.
const CONCURRENCY: usize = 16;

fn review(i: usize) -> Value {
    let (operation, name, priority) = match i % 3 {
        0 => ("CREATE", format!("user-{i}"), 120 + (i % 20) as i64),
        1 => ("CREATE", "mine".to_owned(), 150),
        _ => ("UPDATE", "baseline".to_owned(), 253),
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
            "object": object,
            "oldObject": if operation == "UPDATE" { object.clone() } else { Value::Null },
        }
    })
}

/// Table 4.
pub async fn latency(requests: usize) {
    // A synced cache holding the six system Tiers.
    let cluster = MemoryCluster::builder()
        .with_tiers(DesiredSet::antrea().tiers().to_vec())
        .build();
    let lister: Arc<dyn TierLister> = Arc::new(cluster.lister());
    let readiness = Readiness::new();
    readiness.register(TIER_CACHE_SYNCED, from_fn(|| CheckState::Ok));
    let webhook = Webhook::new(lister, AdmissionPolicy::antrea("tierd"), &readiness);
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

    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(tls.ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_only()
        .enable_http1()
        .build();
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(https);
    let url = format!("https://{addr}/validate/tier");
    let bodies: Arc<Vec<Bytes>> = Arc::new(
        (0..requests)
            .map(|i| Bytes::from(review(i).to_string()))
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
    println!(
        "4. Webhook /validate/tier over loopback TLS ({requests} AdmissionReviews, {CONCURRENCY} concurrent keep-alive clients, mix of allowed and denied CREATE/UPDATE)\n"
    );
    println!("| p50 (µs) | p99 (µs) | max (µs) | throughput (reviews/s) |");
    println!("|---|---|---|---|");
    println!(
        "| {:.0} | {:.0} | {:.0} | {:.0} |\n",
        quantile(&all, 0.5),
        quantile(&all, 0.99),
        quantile(&all, 1.0),
        requests as f64 / elapsed.as_secs_f64().max(f64::EPSILON)
    );
    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(2), served).await;
}

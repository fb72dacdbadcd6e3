//! Start-up against the test API server: tierd vs Antrea's sequential strategy, and the binary.

use std::time::{Duration, Instant};

use tier_core::{Clock, TierLister};
use tier_kube::lister::KubeLister;
use tier_kube::writer::WriterConfig;
use tier_runtime::TokioClock;
use tier_tests::{Cluster, Tierd};
use tier_testserver::{Fault, Verb};

use crate::median;

/// Every verb a start-up uses gets `latency` before it is handled.
fn inject_latency(cluster: &Cluster, latency: Duration) {
    if latency.is_zero() {
        return;
    }
    for verb in [
        Verb::List,
        Verb::Watch,
        Verb::Get,
        Verb::Create,
        Verb::Update,
    ] {
        cluster.server.inject(Fault::delay(verb, latency).forever());
    }
}

/// A client with kube's retries off (as tierd's writer's), used for the watch too.
async fn client(cluster: &Cluster) -> kube::Client {
    let config = tier_kube::client::config(&tier_kube::client::ClientOptions {
        kubeconfig: Some(cluster.kubeconfig.0.clone()),
        ..tier_kube::client::ClientOptions::default()
    })
    .await
    .unwrap();
    tier_kube::client::writer_client(config).unwrap()
}

/// (synced, converged) in milliseconds for one run of `strategy` from an empty cluster.
async fn one_run(strategy: &'static str, latency: Duration) -> (f64, f64) {
    let cluster = Cluster::antrea().await;
    inject_latency(&cluster, latency);
    let client = client(&cluster).await;
    let start = Instant::now();
    let lister = KubeLister::start(client.clone()).unwrap();
    let writer = lister.writer(client, WriterConfig::default());
    let watcher = lister.clone();
    let synced = tokio::spawn(async move {
        watcher.wait_synced().await;
        start.elapsed()
    });
    let work = tokio::spawn(crate::strategy::run(strategy, lister, writer, 0));
    // Converged = the API server holds every Tier as desired (the same test for both).
    while !cluster.has_antrea_tiers() {
        tokio::time::sleep_until((TokioClock.now() + Duration::from_micros(200)).into()).await;
    }
    let converged = start.elapsed();
    work.abort();
    let synced = synced.await.unwrap();
    (ms(synced), ms(converged))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Table 1a: the adapters in-process, tierd vs the sequential baseline.
pub async fn adapters(runs: usize) {
    println!(
        "1. Start-up through tier-kube against the test API server (median of {runs} runs, empty cluster, 6 Tiers)\n"
    );
    println!("| latency per call | strategy | synced (ms) | converged (ms) | baseline / tierd |");
    println!("|---|---|---|---|---|");
    for latency in [Duration::ZERO, Duration::from_millis(20)] {
        let mut tierd_converged = 0.0;
        for strategy in [crate::strategy::TIERD, crate::strategy::ANTREA_NEW] {
            let (mut synced, mut converged): (Vec<f64>, Vec<f64>) = (Vec::new(), Vec::new());
            for _ in 0..runs {
                let (s, c) = one_run(strategy, latency).await;
                synced.push(s);
                converged.push(c);
            }
            let (s, c) = (median(&mut synced), median(&mut converged));
            let ratio = if strategy == crate::strategy::TIERD {
                tierd_converged = c;
                "1.0".to_owned()
            } else {
                format!("{:.1}", c / tierd_converged.max(f64::EPSILON))
            };
            println!(
                "| {} ms | {strategy} | {s:.1} | {c:.1} | {ratio} |",
                latency.as_millis()
            );
        }
    }
    println!();
}

/// Table 1b: the real binary.
pub async fn binary(runs: usize) {
    println!(
        "1b. The `tierd run` binary (median of {runs} runs): from spawn to /readyz 200 and to all Tiers stored\n"
    );
    println!("| latency per call | start-to-ready (ms) | start-to-converged (ms) |");
    println!("|---|---|---|");
    for latency in [Duration::ZERO, Duration::from_millis(20)] {
        let (mut ready, mut converged) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            let cluster = Cluster::antrea().await;
            inject_latency(&cluster, latency);
            let tierd = Tierd::run(&cluster, None, &[]).await;
            let r = tierd.until_ok("/readyz").await;
            while !cluster.has_antrea_tiers() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            converged.push(ms(tierd.started.elapsed()));
            ready.push(ms(r));
        }
        println!(
            "| {} ms | {:.1} | {:.1} |",
            latency.as_millis(),
            median(&mut ready),
            median(&mut converged)
        );
    }
    println!();
}

/// Table 2a: requests of one convergence from a drifted cluster, no faults.
pub async fn requests() {
    println!(
        "2a. API requests of one convergence, no faults (3 Tiers missing, 2 drifted, 1 in sync)\n"
    );
    println!("| strategy | creates | updates | GETs | LISTs | WATCHes | Tiers still wrong |");
    println!("|---|---|---|---|---|---|---|");
    for strategy in [crate::strategy::TIERD, crate::strategy::ANTREA_NEW] {
        let cluster = Cluster::antrea().await;
        cluster.seed(
            "baseline",
            253,
            Some("[READ-ONLY]: System generated Baseline Tier"),
        );
        cluster.seed(
            "application",
            240,
            Some("[READ-ONLY]: System generated default Application Tier"),
        );
        cluster.seed("platform", 200, Some("edited"));
        let client = client(&cluster).await;
        let lister = KubeLister::start(client.clone()).unwrap();
        let writer = lister.writer(client, WriterConfig::default());
        crate::strategy::run(strategy, lister, writer, 0).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        let log = cluster.server.requests();
        let wrong = tier_tests::antrea()
            .into_iter()
            .filter(|(n, p, d)| cluster.stored(n) != Some((*p, Some((*d).to_owned()))))
            .count();
        println!(
            "| {strategy} | {} | {} | {} | {} | {} | {wrong} |",
            log.count(Verb::Create, None),
            log.count(Verb::Update, None),
            log.count(Verb::Get, None),
            log.count(Verb::List, None),
            log.count(Verb::Watch, None),
        );
    }
    println!();
}

/// Table 5: peak RSS of `tierd run` after converging and serving.
pub async fn peak_rss() {
    println!(
        "5. Peak RSS of `tierd run` (converged six Tiers, then 2,000 /readyz and /metrics requests; with and without 10,000 Antrea policies listed into its policy caches)\n"
    );
    println!("| policies in the cluster | VmHWM (peak RSS) | VmRSS (now) |");
    println!("|---|---|---|");
    rss_with(0).await;
    rss_with(crate::webhook::POLICIES).await;
    println!();
}

/// One row of table 5: `policies` policies (half cluster-scoped, half namespaced).
async fn rss_with(policies: usize) {
    use tier_testserver::PolicyResource;
    use tier_testserver::policies::policy;

    let cluster = Cluster::antrea().await;
    let store = cluster.server.store().policies();
    for i in 0..policies {
        let tier = format!("tier-{}", i % 50);
        let (resource, namespace) = if i % 2 == 0 {
            (PolicyResource::ClusterNetworkPolicies, None)
        } else {
            (
                PolicyResource::NetworkPolicies,
                Some(format!("ns-{}", i % 100)),
            )
        };
        let object = policy(resource, namespace.as_deref(), &format!("p-{i}"), &tier);
        store.create(resource, object).unwrap();
    }
    let tierd = Tierd::run(&cluster, None, &[]).await;
    tierd.until_ok("/readyz/system-tiers").await;
    tierd.until_ok("/readyz/acnp-cache-synced").await;
    tierd.until_ok("/readyz/annp-cache-synced").await;
    for i in 0..2000 {
        let path = if i % 2 == 0 {
            "/readyz?verbose"
        } else {
            "/metrics"
        };
        let _ = tierd.get(path).await;
    }
    let pid = tierd.pid();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .map(|l| l.trim_start_matches(name).trim().to_owned())
            .unwrap_or_else(|| "n/a".to_owned())
    };
    println!("| {policies} | {} | {} |", field("VmHWM:"), field("VmRSS:"));
}

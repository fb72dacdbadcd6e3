//! Memory and log costs an unauthenticated caller can impose on the real `tierd run` binary
//! (TLS webhook, default limits), one fresh process per attack, its peak RSS (VmHWM from
//! /proc) beside the Deployment's 128 MiB memory limit:
//!
//! - a reservation flood: forged UPDATE reviews claiming tierd's own user, each "moving" a Tier
//!   of a distinct 1 MB name;
//! - N TLS connections each holding a body one byte short of its Content-Length, at the
//!   webhook's body limit (found by asking: the largest body answered 400 rather than 413);
//! - log amplification: denied CREATEs of Tiers with 2 MB names (log bytes written);
//! - a denial loop: small denied CREATEs in a tight loop from 4 connections for 2 s.
//!
//! A debug build runs smaller attacks (it is CI's smoke run, not a measurement).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::ServerName;
use serde_json::{Value, json};
use tier_tests::{Cluster, Tierd, Tls, USER};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// The Deployment's memory limit (deploy/base), MiB.
const LIMIT_MIB: f64 = 128.0;

type Https = hyper_rustls::HttpsConnector<HttpConnector>;

struct Target {
    _cluster: Cluster,
    tls: Tls,
    tierd: Tierd,
    client: Client<Https, Full<Bytes>>,
    url: String,
}

impl Target {
    async fn start() -> Self {
        let cluster = Cluster::antrea().await;
        let tls = Tls::new();
        let tierd = Tierd::run(&cluster, Some(&tls), &[]).await;
        tierd.until_ok("/readyz").await;
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls.client_config())
            .https_only()
            .enable_http1()
            .build();
        let client = Client::builder(TokioExecutor::new()).build(https);
        let url = format!("https://{}/validate/tier", tierd.addr);
        Self {
            _cluster: cluster,
            tls,
            tierd,
            client,
            url,
        }
    }

    /// POSTs `body`; the status code (0 when the connection failed).
    async fn post(&self, body: Bytes) -> u16 {
        let request = hyper::Request::post(&self.url)
            .header("content-type", "application/json")
            .body(Full::new(body))
            .unwrap();
        match tokio::time::timeout(Duration::from_secs(20), self.client.request(request)).await {
            Ok(Ok(response)) => {
                let status = response.status().as_u16();
                let _ = response.into_body().collect().await;
                status
            }
            _ => 0,
        }
    }

    fn hwm_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.tierd.pid()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_default()
    }

    /// Bytes and INFO-or-louder lines logged so far.
    fn logged(&self) -> (usize, usize) {
        let logs = self.tierd.logs();
        let bytes = logs.iter().map(|l| l.len() + 1).sum();
        let loud = logs
            .iter()
            .filter(|l| !l.contains("\"level\":\"DEBUG\"") && !l.contains("\"level\":\"TRACE\""))
            .count();
        (bytes, loud)
    }

    /// `tierd_http_connections_closed_total{server="webhook",reason}` from /metrics.
    async fn closed(&self, reason: &str) -> String {
        let (_, text) = self.tierd.get("/metrics").await;
        let key = format!(
            "tierd_http_connections_closed_total{{server=\"webhook\",reason=\"{reason}\"}} "
        );
        text.lines()
            .find_map(|l| l.strip_prefix(&key))
            .unwrap_or("0")
            .to_owned()
    }
}

fn review(operation: &str, name: &str, user: &str, old: Option<i64>, new: i64) -> Value {
    let object = json!({
        "apiVersion": "crd.antrea.io/v1beta1", "kind": "Tier",
        "metadata": {"name": "x"}, "spec": {"priority": new},
    });
    let old_object = old.map(|p| {
        json!({
            "apiVersion": "crd.antrea.io/v1beta1", "kind": "Tier",
            "metadata": {"name": "x"}, "spec": {"priority": p},
        })
    });
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "00000000-0000-0000-0000-000000000001",
            "kind": {"group": "crd.antrea.io", "version": "v1beta1", "kind": "Tier"},
            "resource": {"group": "crd.antrea.io", "version": "v1beta1", "resource": "tiers"},
            "name": name,
            "operation": operation,
            "userInfo": {"username": user},
            "object": object,
            "oldObject": old_object,
        }
    })
}

/// Counts of each status code, as `200×3 413×1`.
fn statuses(codes: &[u16]) -> String {
    let mut counts = std::collections::BTreeMap::<u16, usize>::new();
    for c in codes {
        *counts.entry(*c).or_default() += 1;
    }
    counts
        .iter()
        .map(|(c, n)| format!("{c}×{n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn row(attack: &str, answers: &str, before: u64, peak: u64, log: &str) {
    let verdict = if mib(peak) < LIMIT_MIB {
        "within"
    } else {
        "**over**"
    };
    println!(
        "| {attack} | {answers} | {:.1} | {:.1} | {LIMIT_MIB:.0} ({verdict}) | {log} |",
        mib(before),
        mib(peak)
    );
}

/// The largest body the webhook reads (answered 400 for not being JSON; a larger one gets 413,
/// or its connection is closed before the client finished sending).
async fn body_limit(target: &Target) -> usize {
    let (mut lo, mut hi) = (1024usize, 16 * 1024 * 1024);
    while hi - lo > 1024 {
        let mid = lo + (hi - lo) / 2;
        if target.post(Bytes::from(vec![b'x'; mid])).await == 400 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

async fn flood(requests: usize) {
    let target = Target::start().await;
    let before = target.hwm_kib();
    let mut codes = Vec::with_capacity(requests);
    let stem = "a".repeat(1_000_000);
    for i in 0..requests {
        let name = format!("{stem}{i}");
        let body = review("UPDATE", &name, USER, Some(9), 10 + (i % 200) as i64);
        codes.push(target.post(Bytes::from(body.to_string())).await);
    }
    let peak = target.hwm_kib();
    let (log, _) = target.logged();
    row(
        &format!("reservation flood: {requests} forged UPDATEs, distinct 1 MB names"),
        &statuses(&codes),
        before,
        peak,
        &format!("{:.1} MiB", log as f64 / 1048576.0),
    );
}

async fn held_bodies(connections: usize) {
    let target = Target::start().await;
    let limit = body_limit(&target).await;
    let before = target.hwm_kib();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(target.tls.client_config()));
    let head = format!(
        "POST /validate/tier HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {limit}\r\n\r\n"
    );
    let body = Bytes::from(vec![b' '; limit - 1]);
    let (release, released) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let (connector, head, body, addr) = (
            connector.clone(),
            head.clone(),
            body.clone(),
            target.tierd.addr,
        );
        let mut released = released.clone();
        tasks.push(tokio::spawn(async move {
            let Ok(tcp) = TcpStream::connect(addr).await else {
                return false;
            };
            let name = ServerName::try_from("localhost").unwrap();
            let Ok(mut tls) = connector.connect(name, tcp).await else {
                return false;
            };
            let sent = async {
                tls.write_all(head.as_bytes()).await?;
                tls.write_all(&body).await?;
                tls.flush().await
            };
            let sent = matches!(
                tokio::time::timeout(Duration::from_secs(6), sent).await,
                Ok(Ok(()))
            );
            let _ = released.wait_for(|r| *r).await;
            drop(tls);
            sent
        }));
    }
    // Hold until every body is sent or 7 s passed (the body timeout is 10 s).
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(7) && tasks.iter().any(|t| !t.is_finished()) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if start.elapsed() > Duration::from_secs(2) && released.has_changed().is_err() {
            break;
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let peak = target.hwm_kib();
    let refused = target.closed("body_budget").await;
    let _ = release.send(true);
    let mut sent = 0;
    for task in tasks {
        sent += usize::from(task.await.unwrap_or(false));
    }
    row(
        &format!("{connections} TLS connections each holding {limit} B of body, one byte short"),
        &format!("{sent} fully sent, {refused} refused (503)"),
        before,
        peak,
        "",
    );
}

async fn log_amplification(requests: usize) {
    let target = Target::start().await;
    let before = target.hwm_kib();
    let (log_before, _) = target.logged();
    let name = "b".repeat(2_000_000);
    let body = Bytes::from(review("CREATE", &name, "mallory", None, 150).to_string());
    let mut codes = Vec::new();
    for _ in 0..requests {
        codes.push(target.post(body.clone()).await);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (log_after, _) = target.logged();
    let peak = target.hwm_kib();
    let per = (log_after - log_before) as f64 / requests.max(1) as f64;
    row(
        &format!("log amplification: {requests} denied CREATEs, 2 MB names"),
        &statuses(&codes),
        before,
        peak,
        &format!(
            "{:.1} MiB ({:.2} MB per review)",
            (log_after - log_before) as f64 / 1048576.0,
            per / 1e6
        ),
    );
}

async fn denial_loop(seconds: u64) {
    let target = Arc::new(Target::start().await);
    let before = target.hwm_kib();
    let (bytes_before, lines_before) = target.logged();
    let body = Bytes::from(review("CREATE", "squatter", "mallory", None, 150).to_string());
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (target, body) = (Arc::clone(&target), body.clone());
        tasks.push(tokio::spawn(async move {
            let mut codes = Vec::new();
            while Instant::now() < deadline {
                codes.push(target.post(body.clone()).await);
            }
            codes
        }));
    }
    let mut codes = Vec::new();
    for task in tasks {
        codes.extend(task.await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (bytes_after, lines_after) = target.logged();
    row(
        &format!("denial loop: 4 connections, {seconds} s"),
        &statuses(&codes),
        before,
        target.hwm_kib(),
        &format!(
            "{} lines, {:.1} KiB",
            lines_after - lines_before,
            (bytes_after - bytes_before) as f64 / 1024.0
        ),
    );
}

/// Table 7; see the [module docs](self).
pub async fn attacks() {
    let debug = cfg!(debug_assertions);
    println!(
        "7. Attacks from issue 17 against `tierd run` (TLS webhook, default limits, no client \
         authentication), a fresh process each{}\n",
        if debug {
            "; debug build: reduced sizes"
        } else {
            ""
        }
    );
    println!(
        "| attack | answers | VmHWM before (MiB) | VmHWM peak (MiB) | Deployment limit (MiB) | logged |"
    );
    println!("|---|---|---|---|---|---|");
    flood(if debug { 5 } else { 200 }).await;
    let connections: &[usize] = if debug { &[50] } else { &[50, 200, 1024] };
    for &n in connections {
        held_bodies(n).await;
    }
    log_amplification(if debug { 2 } else { 20 }).await;
    denial_loop(if debug { 1 } else { 2 }).await;
    println!();
}

//! Hostile clients against the real `tierd run` binary (TLS webhook, default limits): 1,000
//! slowloris connections, each holding 12 KiB of an unfinished request head, and 300 TCP
//! connections that never send a ClientHello, all on the webhook port. Meanwhile `/livez` on
//! the probe port and AdmissionReviews on the webhook port (a new TLS connection each, as a
//! cold kube-apiserver would) are timed, and tierd's peak RSS is read from /proc.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use serde_json::json;
use tier_tests::{Cluster, Tierd, Tls};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::quantile;

const SLOWLORIS: usize = 1000;
const STALLED_HANDSHAKES: usize = 300;
/// Header bytes each slowloris connection holds (tierd's head limit is 16 KiB).
const HELD_HEAD: usize = 12 * 1024;

fn connector(tls: &Tls) -> tokio_rustls::TlsConnector {
    let config = tls.client_config();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

fn review() -> String {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "bench",
            "kind": {"group": "crd.antrea.io", "version": "v1beta1", "kind": "Tier"},
            "resource": {"group": "crd.antrea.io", "version": "v1beta1", "resource": "tiers"},
            "name": "mine",
            "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": {
                "apiVersion": "crd.antrea.io/v1beta1", "kind": "Tier",
                "metadata": {"name": "mine"}, "spec": {"priority": 10},
            },
        }
    })
    .to_string()
}

/// One request on a fresh connection (`Connection: close`); whether it got a 200, and how long.
async fn timed<S>(stream: S, request: &str) -> (bool, f64)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut stream = stream;
    let start = Instant::now();
    let _ = stream.write_all(request.as_bytes()).await;
    let mut reply = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut reply)).await;
    let ok = read.is_ok() && reply.starts_with(b"HTTP/1.1 200");
    (ok, start.elapsed().as_secs_f64() * 1000.0)
}

async fn livez(addr: SocketAddr) -> (bool, f64) {
    let start = Instant::now();
    let Ok(tcp) = TcpStream::connect(addr).await else {
        return (false, 0.0);
    };
    let (ok, _) = timed(
        tcp,
        "GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    (ok, start.elapsed().as_secs_f64() * 1000.0)
}

async fn admission(addr: SocketAddr, connector: &tokio_rustls::TlsConnector) -> (bool, f64) {
    let body = review();
    let request = format!(
        "POST /validate/tier HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let start = Instant::now();
    let Ok(tcp) = TcpStream::connect(addr).await else {
        return (false, 0.0);
    };
    let name = ServerName::try_from("localhost").unwrap();
    let Ok(Ok(tls)) =
        tokio::time::timeout(Duration::from_secs(10), connector.connect(name, tcp)).await
    else {
        return (false, start.elapsed().as_secs_f64() * 1000.0);
    };
    let (ok, _) = timed(tls, &request).await;
    (ok, start.elapsed().as_secs_f64() * 1000.0)
}

fn rss(pid: u32) -> (String, String) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .map(|l| l.trim_start_matches(name).trim().to_owned())
            .unwrap_or_else(|| "n/a".to_owned())
    };
    (field("VmHWM:"), field("VmRSS:"))
}

fn row(what: &str, samples: &mut [(bool, f64)]) {
    let failed = samples.iter().filter(|(ok, _)| !ok).count();
    let mut ms: Vec<f64> = samples.iter().map(|(_, ms)| *ms).collect();
    ms.sort_by(f64::total_cmp);
    println!(
        "| {what} | {} | {failed} | {:.2} | {:.2} | {:.2} |",
        ms.len(),
        quantile(&ms, 0.5),
        quantile(&ms, 0.99),
        ms.last().copied().unwrap_or_default()
    );
}

/// Runs the scenario `requests` times per kind of request; prints a table.
pub async fn hostile(requests: usize) {
    println!(
        "6. Hostile clients: {SLOWLORIS} slowloris connections ({} KiB of head each) and \
         {STALLED_HANDSHAKES} stalled handshakes on the webhook port of `tierd run` (TLS, \
         default limits)\n",
        HELD_HEAD / 1024
    );
    let cluster = Cluster::antrea().await;
    let tls = Tls::new();
    let tierd = Tierd::run(&cluster, Some(&tls), &[]).await;
    tierd.until_ok("/readyz").await;
    let connector = connector(&tls);
    let (hwm_before, _) = rss(tierd.pid());

    let head = format!(
        "POST /validate/tier HTTP/1.1\r\nHost: x\r\nX-Slow: {}",
        "a".repeat(HELD_HEAD)
    );
    let mut held = Vec::new();
    let mut slowloris_open = 0;
    for _ in 0..SLOWLORIS {
        let Ok(tcp) = TcpStream::connect(tierd.addr).await else {
            continue;
        };
        let name = ServerName::try_from("localhost").unwrap();
        if let Ok(mut stream) = connector.connect(name, tcp).await
            && stream.write_all(head.as_bytes()).await.is_ok()
        {
            slowloris_open += 1;
            held.push(stream);
        }
    }
    let mut stalled = Vec::new();
    for _ in 0..STALLED_HANDSHAKES {
        if let Ok(tcp) = TcpStream::connect(tierd.addr).await {
            stalled.push(tcp);
        }
    }

    let mut probes = Vec::with_capacity(requests);
    let mut reviews = Vec::with_capacity(requests);
    for _ in 0..requests {
        probes.push(livez(tierd.probe_addr).await);
        reviews.push(admission(tierd.addr, &connector).await);
    }
    let (hwm_attack, rss_attack) = rss(tierd.pid());
    drop((held, stalled));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, rss_after) = rss(tierd.pid());

    println!(
        "attack: {slowloris_open} slowloris connections opened, {STALLED_HANDSHAKES} stalled handshakes\n"
    );
    println!("| request during the attack | n | failed | p50 ms | p99 ms | max ms |");
    println!("|---|---|---|---|---|---|");
    row("`GET /livez` (probe port, new connection)", &mut probes);
    row(
        "AdmissionReview (webhook port, new TLS connection)",
        &mut reviews,
    );
    println!();
    println!("| VmHWM before | VmHWM during | VmRSS during | VmRSS 0.5 s after |");
    println!("|---|---|---|---|");
    println!("| {hwm_before} | {hwm_attack} | {rss_attack} | {rss_after} |\n");
}

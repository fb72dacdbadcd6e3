//! Latency below saturation (4c): a fixed-rate, open-loop load client in its own process
//! (`tier-bench --open-loop ADDR ...`, spawned by [`latency`]) against the reference responder
//! and the `tierd run` binary.
//!
//! Each of [`CONNECTIONS`] keep-alive TLS connections sends its share of the rate on a fixed
//! schedule, one review in flight at a time (HTTP/1.1). A review that had to wait behind the
//! previous one's answer counts from the moment it was *due*, not from when it was sent: a server
//! that stalls a connection is charged for every review that waited behind the stall (no
//! coordinated omission, as in wrk2). What the client's own timer (tokio's, of millisecond
//! resolution) adds is not charged: a review sent late on an idle connection counts from when it
//! was sent, and the reviews queued behind it only for the wait the server caused. This is
//! what kube-apiserver sees of a webhook that is not overloaded; 4b's wrk measures saturation.
//! Both review kinds are measured: a CREATE goes through the reservation table, an UPDATE
//! through Antrea's rules alone.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tier_tests::{TempFile, Tls};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::quantile;

/// Connections of the client.
const CONNECTIONS: u32 = 16;

/// What one run of the client measured.
#[derive(Clone, Copy, Debug, Default)]
struct Latency {
    sent: usize,
    failed: usize,
    p50: f64,
    p99: f64,
    p999: f64,
    max: f64,
}

/// The client: `rate` reviews/s of `body` to `addr` for `seconds`, trusting `ca`; prints one
/// line `sent failed p50 p99 p999 max` (µs).
pub fn client(addr: SocketAddr, rate: u32, seconds: u64, body: &Path, ca: &Path) {
    let body = Bytes::from(std::fs::read(body).unwrap());
    let config = tier_tests::client_config_trusting(&std::fs::read(ca).unwrap());
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (mut latencies, failed) = runtime.block_on(async move {
        let interval = Duration::from_secs_f64(f64::from(CONNECTIONS) / f64::from(rate.max(1)));
        let start = Instant::now() + Duration::from_millis(200);
        let end = start + Duration::from_secs(seconds);
        let tasks: Vec<_> = (0..CONNECTIONS)
            .map(|i| {
                let (connector, body) = (connector.clone(), body.clone());
                // Connections staggered evenly over one interval.
                let first = start + interval.mul_f64(f64::from(i) / f64::from(CONNECTIONS));
                tokio::spawn(connection(addr, connector, body, first, interval, end))
            })
            .collect();
        let mut all = Vec::new();
        let mut failed = 0;
        for task in tasks {
            let (latencies, errors) = task.await.unwrap();
            all.extend(latencies);
            failed += errors;
        }
        (all, failed)
    });
    latencies.sort_by(f64::total_cmp);
    println!(
        "{} {failed} {:.0} {:.0} {:.0} {:.0}",
        latencies.len(),
        quantile(&latencies, 0.5),
        quantile(&latencies, 0.99),
        quantile(&latencies, 0.999),
        latencies.last().copied().unwrap_or_default()
    );
}

/// One connection's schedule: a review due every `interval` from `first` until `end`; the
/// latencies (µs, from when each was due, less the delay the client's timer caused; see the
/// [module docs](self)) and the count of failed reviews.
async fn connection(
    addr: SocketAddr,
    connector: tokio_rustls::TlsConnector,
    body: Bytes,
    first: Instant,
    interval: Duration,
    end: Instant,
) -> (Vec<f64>, usize) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let tls = connector.connect(name, tcp).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let (mut latencies, mut failed) = (Vec::new(), 0);
    let mut due = first;
    let mut done = Instant::now();
    // How late the client itself made the review in flight: its timer's delay on an idle
    // connection, carried to the reviews queued behind it (at most the wait they had).
    let mut own_delay = Duration::ZERO;
    while due < end {
        own_delay = if done > due {
            own_delay.min(done - due)
        } else {
            tokio::time::sleep_until(due).await;
            Instant::now().saturating_duration_since(due)
        };
        let start = due + own_delay;
        let request = hyper::Request::post("/validate/tier")
            .header("host", "localhost")
            .header("content-type", "application/json")
            .body(Full::new(body.clone()))
            .unwrap();
        let ok = match sender.ready().await {
            Ok(()) => match sender.send_request(request).await {
                Ok(response) => {
                    let status = response.status();
                    response.into_body().collect().await.is_ok() && status.is_success()
                }
                Err(_) => false,
            },
            Err(_) => false,
        };
        done = Instant::now();
        if ok {
            latencies.push(done.duration_since(start).as_secs_f64() * 1e6);
        } else {
            failed += 1;
        }
        due += interval;
    }
    (latencies, failed)
}

/// Runs the client in its own process against `addr`.
fn measure(addr: SocketAddr, rate: u32, seconds: u64, body: &Path, ca: &Path) -> Latency {
    let output = Command::new(std::env::current_exe().unwrap())
        .arg("--open-loop")
        .arg(addr.to_string())
        .args(["--open-loop-rate", &rate.to_string()])
        .args(["--open-loop-seconds", &seconds.to_string()])
        .arg("--open-loop-body")
        .arg(body)
        .arg("--open-loop-ca")
        .arg(ca)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text.lines().last().unwrap_or_default();
    let fields: Vec<f64> = line
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    match fields.as_slice() {
        [sent, failed, p50, p99, p999, max] => Latency {
            sent: *sent as usize,
            failed: *failed as usize,
            p50: *p50,
            p99: *p99,
            p999: *p999,
            max: *max,
        },
        _ => {
            eprintln!(
                "open-loop client printed {text:?}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            Latency::default()
        }
    }
}

/// Table 4c; see the [module docs](self): for each review (CREATE, UPDATE) and rate, `rounds`
/// rounds of the reference and `tierd run` (alternating which goes first), medians over rounds.
pub async fn latency(rates: &[u32], seconds: u64, rounds: usize) {
    let tls = Tls::new();
    let (reference, _stop) = crate::throughput::reference_server(&tls).await;
    let cluster = tier_tests::Cluster::antrea().await;
    let tierd = tier_tests::Tierd::run(&cluster, Some(&tls), &[]).await;
    tierd.until_ok("/readyz").await;
    let ca: PathBuf = tls.cert.0.clone();
    println!(
        "4c. Latency below saturation: CREATE and UPDATE reviews at a fixed rate, open loop \
         ({CONNECTIONS} keep-alive TLS connections, latency from when each review was due, or \
         was sent if its connection was idle; {seconds} s per round, {rounds} rounds, medians \
         over rounds)\n"
    );
    println!(
        "| review | rate (reviews/s) | server | sent | failed | p50 (µs) | p99 (µs) | p99.9 (µs) | max (µs) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let servers = [("reference", reference), ("`tierd run`", tierd.addr)];
    for operation in ["CREATE", "UPDATE"] {
        let body = TempFile::with(
            "review",
            "json",
            &crate::throughput::review(operation).to_string(),
        );
        for &rate in rates {
            let mut results: [Vec<Latency>; 2] = Default::default();
            for round in 0..rounds.max(1) {
                for k in 0..2 {
                    let i = (k + round) % 2;
                    let (addr, body, ca) = (servers[i].1, body.0.clone(), ca.clone());
                    let measured = tokio::task::spawn_blocking(move || {
                        measure(addr, rate, seconds, &body, &ca)
                    })
                    .await
                    .unwrap();
                    results[i].push(measured);
                }
            }
            for (i, (name, _)) in servers.iter().enumerate() {
                let of = |f: fn(&Latency) -> f64| {
                    crate::median(&mut results[i].iter().map(f).collect::<Vec<_>>())
                };
                println!(
                    "| {operation} | {rate} | {name} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |",
                    of(|l| l.sent as f64),
                    of(|l| l.failed as f64),
                    of(|l| l.p50),
                    of(|l| l.p99),
                    of(|l| l.p999),
                    of(|l| l.max),
                );
            }
        }
    }
    println!();
}

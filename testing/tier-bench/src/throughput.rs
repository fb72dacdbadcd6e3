//! Webhook throughput against its limit: tier-server's webhook, the `tierd run` binary's
//! webhook (its own process, against a test API server, with its default flags) and a minimal
//! static responder on the same stack (tokio, hyper's HTTP/1.1 server, rustls with the same
//! certificate configuration) answering a fixed AdmissionReview response, measured side by
//! side with the same load client, for a CREATE and an UPDATE review.
//!
//! One more server calibrates the p99: the reference spending 1 µs of CPU per request before
//! it answers. It differs from the reference by nothing but a little work, so the difference
//! between their p99s at saturation is what any work per request costs on this machine with
//! this client, whatever the server's code.
//!
//! The load client is `wrk` (16 connections, 2 threads, its own process) when it is installed,
//! else an in-process hyper client over 16 keep-alive TLS connections (so CI without wrk still
//! runs the section; client and server then share the runtime).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use tier_core::admission::AdmissionPolicy;
use tier_core::{DesiredSet, TierLister};
use tier_memory::MemoryCluster;
use tier_server::readiness::{CheckState, Readiness};
use tier_server::readiness::{TIER_CACHE_SYNCED, from_fn};
use tier_server::server::{Routes, Server};
use tier_server::tls::{CertFiles, CertReloader};
use tier_server::webhook::Webhook;
use tier_tests::{TempFile, Tls};
use tokio::net::TcpListener;

use crate::quantile;

/// Connections of the load client.
const CONNECTIONS: usize = 16;

/// One measurement: reviews per second, latency quantiles in µs, and the CPU time the serving
/// process (this one for the in-process servers, tierd's for the binary; wrk is another
/// process) spent per review, in µs.
#[derive(Clone, Copy, Debug, Default)]
struct Measured {
    rate: f64,
    p50: f64,
    p99: f64,
    /// `None` for the in-process client, whose CPU time cannot be told from the server's.
    cpu_per_review: Option<f64>,
    /// The part of it spent in the kernel (system time).
    system_per_review: Option<f64>,
}

/// CPU time (user and system, and system alone) of process `pid` (this one for `None`) so
/// far, in µs, from `/proc/<pid>/stat` (`None` where there is no such file).
fn process_cpu_us(pid: Option<u32>, ticks_per_second: f64) -> Option<(f64, f64)> {
    let path = pid.map_or_else(
        || "/proc/self/stat".to_owned(),
        |p| format!("/proc/{p}/stat"),
    );
    let stat = std::fs::read_to_string(path).ok()?;
    // Fields after the command name (which is in parentheses and may hold spaces): state is
    // field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((
        (utime + stime) * 1e6 / ticks_per_second,
        stime * 1e6 / ticks_per_second,
    ))
}

/// The kernel's clock ticks per second (`getconf CLK_TCK`, 100 when unknown).
fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

pub fn review(operation: &str) -> Value {
    let (name, priority) = match operation {
        "CREATE" => ("user-tier", 120),
        _ => ("baseline", 253),
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
            "uid": "00000000-0000-0000-0000-000000000001",
            "kind": {"group": "crd.antrea.io", "version": "v1beta1", "kind": "Tier"},
            "resource": {"group": "crd.antrea.io", "version": "v1beta1", "resource": "tiers"},
            "name": name,
            "operation": operation,
            "userInfo": {"username": "alice"},
            "object": object,
            "oldObject": if operation == "CREATE" { Value::Null } else { object.clone() },
        }
    })
}

/// The fixed answer of the reference responder: an allowed review.
const ALLOWED: &str = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"00000000-0000-0000-0000-000000000001","allowed":true}}"#;

/// The webhook over a synced cache of Antrea's six Tiers, and its readiness.
fn webhook() -> (Webhook, Readiness) {
    let cluster = MemoryCluster::builder()
        .with_tiers(DesiredSet::antrea().tiers().to_vec())
        .build();
    let lister: Arc<dyn TierLister> = Arc::new(cluster.lister());
    let readiness = Readiness::new();
    readiness.register(TIER_CACHE_SYNCED, from_fn(|| CheckState::Ok));
    let webhook = Webhook::new(lister, AdmissionPolicy::antrea("tierd"), &readiness);
    (webhook, readiness)
}

/// The answer of a webhook without claims, which is ready at its first poll.
fn answer_now<T>(answer: impl std::future::Future<Output = T>) -> Option<T> {
    let mut answer = std::pin::pin!(answer);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match answer.as_mut().poll(&mut context) {
        std::task::Poll::Ready(value) => Some(value),
        std::task::Poll::Pending => None,
    }
}

/// CPU time of the handler alone, µs per review: `Webhook::respond` (decode, review, encode).
fn handler_alone(body: &str, n: usize) -> f64 {
    let (webhook, _readiness) = webhook();
    let started = Instant::now();
    for _ in 0..n {
        std::hint::black_box(answer_now(webhook.respond(body.as_bytes())));
    }
    started.elapsed().as_secs_f64() * 1e6 / n.max(1) as f64
}

/// `--only handler`: `requests` CREATE and as many UPDATE reviews through the handler alone,
/// with the µs of CPU each took.
pub fn handler(requests: usize) {
    for operation in ["CREATE", "UPDATE"] {
        let body = review(operation).to_string();
        let us = handler_alone(&body, requests);
        println!("{operation}: {us:.2} µs per review through `Webhook::respond`");
    }
}

/// tier-server's webhook, or with `static_route` an axum route answering [`ALLOWED`] after
/// reading the body, on tier-server's [`Server`] (which tells the server's cost from the
/// handler's).
async fn webhook_server(
    tls: &Tls,
    static_route: bool,
) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let router = if static_route {
        axum::Router::new().route(
            "/validate/tier",
            axum::routing::post(|_body: Bytes| async {
                ([(hyper::header::CONTENT_TYPE, "application/json")], ALLOWED)
            }),
        )
    } else {
        let (webhook, readiness) = webhook();
        Routes::new(readiness).webhook(webhook).into_router()
    };
    let reloader = CertReloader::load(CertFiles::new(&tls.cert.0, &tls.key.0))
        .await
        .unwrap();
    let listener = tier_server::server::bind(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = Server::new(router).tls(reloader.server_config().unwrap());
    tokio::spawn(server.serve(listener, async {
        let _ = stopped.await;
    }));
    (addr, stop)
}

/// The reference: accept, TLS (the same rustls configuration), hyper HTTP/1.1, read the body,
/// answer [`ALLOWED`].
pub async fn reference_server(tls: &Tls) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    calibrated_reference(tls, Duration::ZERO).await
}

/// Spends `busy` of CPU on the calling thread (a spin on the clock, as a handler's work would:
/// nothing is awaited).
fn spin(busy: Duration) {
    let started = Instant::now();
    while started.elapsed() < busy {
        std::hint::spin_loop();
    }
}

/// The reference, spending `busy` of CPU in each request's handler before it answers: the
/// calibration of 4b (what a little work per request does to a saturated server's p99).
async fn calibrated_reference(
    tls: &Tls,
    busy: Duration,
) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let reloader = CertReloader::load(CertFiles::new(&tls.cert.0, &tls.key.0))
        .await
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(reloader.server_config().unwrap());
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = tokio::select! {
                _ = &mut stopped => return,
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(_) => continue,
                },
            };
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(
                    move |request: hyper::Request<Incoming>| async move {
                        let _ = request.into_body().collect().await;
                        if !busy.is_zero() {
                            spin(busy);
                        }
                        let mut response =
                            hyper::Response::new(Full::new(Bytes::from_static(ALLOWED.as_bytes())));
                        response.headers_mut().insert(
                            hyper::header::CONTENT_TYPE,
                            hyper::header::HeaderValue::from_static("application/json"),
                        );
                        Ok::<_, Infallible>(response)
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (addr, stop)
}

fn wrk_installed() -> bool {
    Command::new("wrk")
        .arg("-v")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("wrk"))
}

/// A wrk latency like `512.00us`, `1.20ms` or `2.00s`, in µs.
fn wrk_duration(text: &str) -> Option<f64> {
    let split = text.find(|c: char| c.is_ascii_alphabetic())?;
    let (value, unit) = text.split_at(split);
    let value: f64 = value.parse().ok()?;
    Some(match unit {
        "us" => value,
        "ms" => value * 1e3,
        "s" => value * 1e6,
        _ => return None,
    })
}

/// wrk against `addr`, with the CPU time of the process serving it (`pid`, this one for `None`).
fn wrk(addr: SocketAddr, pid: Option<u32>, body: &str, seconds: u64, ticks: f64) -> Measured {
    let body_file = TempFile::with("review", "json", body);
    let script = TempFile::with(
        "post",
        "lua",
        &format!(
            "wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\n\
             local f = io.open(\"{}\", \"rb\")\nwrk.body = f:read(\"*a\")\nf:close()\n",
            body_file.0.display()
        ),
    );
    let cpu_before = process_cpu_us(pid, ticks);
    let output = Command::new("wrk")
        .args(["-t2", &format!("-c{CONNECTIONS}"), &format!("-d{seconds}s")])
        .arg("--latency")
        .arg("-s")
        .arg(&script.0)
        .arg(format!("https://{addr}/validate/tier"))
        .output()
        .unwrap();
    let cpu = cpu_before
        .zip(process_cpu_us(pid, ticks))
        .map(|(a, b)| (b.0 - a.0, b.1 - a.1));
    let text = String::from_utf8_lossy(&output.stdout);
    let mut measured = Measured::default();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            [requests, "requests", "in", ..] => {
                let requests: f64 = requests.parse().unwrap_or_default();
                if let Some((cpu, system)) = cpu.filter(|_| requests > 0.0) {
                    measured.cpu_per_review = Some(cpu / requests);
                    measured.system_per_review = Some(system / requests);
                }
            }
            ["Requests/sec:", rate] => measured.rate = rate.parse().unwrap_or_default(),
            ["50%", t] => measured.p50 = wrk_duration(t).unwrap_or_default(),
            ["99%", t] => measured.p99 = wrk_duration(t).unwrap_or_default(),
            _ => {}
        }
    }
    if text.contains("Non-2xx") {
        eprintln!("wrk saw non-2xx answers:\n{text}");
    }
    measured
}

/// The fallback client: `requests` POSTs over 16 keep-alive TLS connections.
async fn in_process(addr: SocketAddr, tls: &Tls, body: &str, requests: usize) -> Measured {
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls.client_config())
        .https_only()
        .enable_http1()
        .build();
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(https);
    let url = format!("https://{addr}/validate/tier");
    let body = Bytes::from(body.to_owned());
    let send = |client: Client<_, Full<Bytes>>, body: Bytes, url: String| async move {
        let request = hyper::Request::post(url)
            .header("content-type", "application/json")
            .body(Full::new(body))
            .unwrap();
        let response = client.request(request).await.unwrap();
        assert_eq!(response.status(), 200);
        let _ = response.into_body().collect().await.unwrap();
    };
    let warm: Vec<_> = (0..CONNECTIONS)
        .map(|_| tokio::spawn(send(client.clone(), body.clone(), url.clone())))
        .collect();
    for task in warm {
        task.await.unwrap();
    }
    let started = Instant::now();
    let per = requests.div_ceil(CONNECTIONS);
    let tasks: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let (client, body, url) = (client.clone(), body.clone(), url.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(per);
                for _ in 0..per {
                    let t = Instant::now();
                    send(client.clone(), body.clone(), url.clone()).await;
                    latencies.push(t.elapsed().as_secs_f64() * 1e6);
                }
                latencies
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    let elapsed = started.elapsed().as_secs_f64().max(f64::EPSILON);
    all.sort_by(f64::total_cmp);
    Measured {
        rate: all.len() as f64 / elapsed,
        p50: quantile(&all, 0.5),
        p99: quantile(&all, 0.99),
        cpu_per_review: None,
        system_per_review: None,
    }
}

/// CPU the calibration server spends per request on top of the reference's.
const CALIBRATION: Duration = Duration::from_micros(1);

/// The servers measured, in table order (the reference first), and their short names.
const SERVERS: [(&str, &str); 5] = [
    ("reference", "ref"),
    (
        "reference + 1 µs of CPU per review (calibration)",
        "ref+1µs",
    ),
    ("tier-server `Server`, static axum route", "static"),
    ("tier-server webhook", "webhook"),
    ("`tierd run` (the binary, default flags)", "tierd"),
];

/// Table 4b; see the [module docs](self). `rounds` rounds per review, each measuring the
/// servers one after another, the order rotated every round (so that none is always measured
/// first or last), after one untimed warm-up round. Shown per server: the median over rounds of
/// the rate, p50, p99 and CPU per review, and the median (with the lowest and highest) over
/// rounds of each round's rate against the reference's in the same round, so that load from
/// elsewhere that changes between rounds cancels; then every round.
pub async fn throughput(requests: usize, seconds: u64, rounds: usize) {
    let tls = Tls::new();
    let (webhook, _stop_webhook) = webhook_server(&tls, false).await;
    let (static_route, _stop_static) = webhook_server(&tls, true).await;
    let (reference, _stop_reference) = reference_server(&tls).await;
    let (calibration, _stop_calibration) = calibrated_reference(&tls, CALIBRATION).await;
    // The daemon as users run it: its own process, its own runtime (`--worker-threads`), the
    // Tier cache from a test API server's watch, logs at info.
    let cluster = tier_tests::Cluster::antrea().await;
    let tierd = tier_tests::Tierd::run(&cluster, Some(&tls), &[]).await;
    tierd.until_ok("/readyz").await;
    let addrs = [reference, calibration, static_route, webhook, tierd.addr];
    let pids = [None, None, None, None, Some(tierd.pid())];
    let wrk = wrk_installed();
    let ticks = clock_ticks();
    let client = if wrk {
        format!("wrk, {CONNECTIONS} connections, 2 threads, {seconds} s per round")
    } else {
        format!(
            "in-process hyper client (wrk not installed), {CONNECTIONS} connections, {requests} reviews per round"
        )
    };
    let rounds = rounds.max(1);
    println!(
        "4b. Webhook throughput against a static TLS responder on the same stack ({client}, \
         {rounds} rounds, the order rotated each round; medians over rounds)\n"
    );
    let measure = |i: usize, body: String, seconds: u64| {
        let (tls, addr, pid) = (&tls, addrs[i], pids[i]);
        async move {
            if wrk {
                tokio::task::spawn_blocking(move || self::wrk(addr, pid, &body, seconds, ticks))
                    .await
                    .unwrap()
            } else {
                in_process(addr, tls, &body, requests).await
            }
        }
    };
    let mut summary = Vec::new();
    let mut per_round = Vec::new();
    let mut handler: Vec<(&str, f64)> = Vec::new();
    for operation in ["CREATE", "UPDATE"] {
        let body = review(operation).to_string();
        if wrk {
            for i in 0..addrs.len() {
                measure(i, body.clone(), 1).await;
            }
        }
        let mut results: [Vec<Measured>; SERVERS.len()] = Default::default();
        for round in 0..rounds {
            let order: Vec<usize> = (0..SERVERS.len())
                .map(|i| (i + round) % SERVERS.len())
                .collect();
            let mut measured = [Measured::default(); SERVERS.len()];
            for &i in &order {
                measured[i] = measure(i, body.clone(), seconds).await;
            }
            let pct = |m: &Measured| 100.0 * m.rate / measured[0].rate.max(f64::EPSILON);
            let rates: Vec<String> = measured
                .iter()
                .map(|m| format!("{:.0} ({:.0})", m.rate, m.p99))
                .collect();
            let pcts: Vec<String> = measured[1..]
                .iter()
                .zip(&SERVERS[1..])
                .map(|(m, (_, short))| match *short {
                    "webhook" | "tierd" => format!("**{:.0} %**", pct(m)),
                    _ => format!("{:.0} %", pct(m)),
                })
                .collect();
            per_round.push(format!(
                "| {operation} | {} | {} | {} | {} |",
                round + 1,
                order
                    .iter()
                    .map(|i| SERVERS[*i].1)
                    .collect::<Vec<_>>()
                    .join(", "),
                rates.join(" | "),
                pcts.join(" | "),
            ));
            for (i, m) in measured.into_iter().enumerate() {
                results[i].push(m);
            }
        }
        for (i, (name, _)) in SERVERS.into_iter().enumerate() {
            let of = |f: fn(&Measured) -> f64| {
                crate::median(&mut results[i].iter().map(f).collect::<Vec<_>>())
            };
            let mut ratios: Vec<f64> = results[i]
                .iter()
                .zip(&results[0])
                .map(|(m, reference)| 100.0 * m.rate / reference.rate.max(f64::EPSILON))
                .collect();
            let ratio = crate::median(&mut ratios);
            let (low, high) = (ratios[0], ratios[ratios.len() - 1]);
            let mut cpu: Vec<f64> = results[i].iter().filter_map(|m| m.cpu_per_review).collect();
            let mut system: Vec<f64> = results[i]
                .iter()
                .filter_map(|m| m.system_per_review)
                .collect();
            let cpu = if cpu.is_empty() {
                "-".to_owned()
            } else {
                format!(
                    "{:.1} ({:.1})",
                    crate::median(&mut cpu),
                    crate::median(&mut system)
                )
            };
            let spread = if i == 0 {
                String::new()
            } else {
                format!(" ({low:.0} to {high:.0})")
            };
            summary.push(format!(
                "| {operation} | {name} | {:.0} | {:.0} | {:.0} | {cpu} | {ratio:.0} %{spread} |",
                of(|m| m.rate),
                of(|m| m.p50),
                of(|m| m.p99),
            ));
        }
        handler.push((operation, handler_alone(&body, requests.max(1000))));
    }
    println!(
        "| review | server | reviews/s | p50 (µs) | p99 (µs) | server CPU per review, µs (of it kernel) | % of reference (lowest to highest round) |"
    );
    println!("|---|---|---|---|---|---|---|");
    for line in summary {
        println!("{line}");
    }
    println!("\nEvery round: reviews/s (p99 µs), and % of the reference in that round:\n");
    let names: Vec<&str> = SERVERS.iter().map(|(_, short)| *short).collect();
    let pct_names: Vec<String> = names[1..].iter().map(|n| format!("{n} %")).collect();
    println!(
        "| review | round | order | {} | {} |",
        names.join(" | "),
        pct_names.join(" | ")
    );
    println!(
        "|---|---|---|{}",
        "---|".repeat(names.len() + pct_names.len())
    );
    for line in per_round {
        println!("{line}");
    }
    println!();
    for (operation, us) in handler {
        println!(
            "The handler alone (decode, review, encode; no HTTP, no TLS) costs {us:.1} µs of CPU \
             per {operation} review."
        );
    }
    println!();
}

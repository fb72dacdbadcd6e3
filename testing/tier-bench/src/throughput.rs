//! Webhook throughput against its limit: tier-server's webhook and a minimal static responder
//! on the same stack (tokio, hyper's HTTP/1.1 server, rustls with the same certificate
//! configuration) answering a fixed AdmissionReview response, measured side by side with the
//! same load client, for a CREATE and an UPDATE review.
//!
//! The load client is `wrk` (16 connections, 2 threads, its own process) when it is installed,
//! else an in-process hyper client over 16 keep-alive TLS connections (so CI without wrk still
//! runs the section; client and server then share the runtime).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

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

/// One measurement: reviews per second and latency quantiles in µs.
#[derive(Clone, Copy, Debug, Default)]
struct Measured {
    rate: f64,
    p50: f64,
    p99: f64,
}

fn review(operation: &str) -> Value {
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

/// CPU time of the handler alone, µs per review: `Webhook::respond` (decode, review, encode).
fn handler_alone(body: &str, n: usize) -> f64 {
    let (webhook, _readiness) = webhook();
    let started = Instant::now();
    for _ in 0..n {
        std::hint::black_box(webhook.respond(body.as_bytes()));
    }
    started.elapsed().as_secs_f64() * 1e6 / n.max(1) as f64
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
async fn reference_server(tls: &Tls) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
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
                let service =
                    hyper::service::service_fn(|request: hyper::Request<Incoming>| async {
                        let _ = request.into_body().collect().await;
                        let mut response =
                            hyper::Response::new(Full::new(Bytes::from_static(ALLOWED.as_bytes())));
                        response.headers_mut().insert(
                            hyper::header::CONTENT_TYPE,
                            hyper::header::HeaderValue::from_static("application/json"),
                        );
                        Ok::<_, Infallible>(response)
                    });
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

fn wrk(addr: SocketAddr, body: &str, seconds: u64) -> Measured {
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
    let output = Command::new("wrk")
        .args(["-t2", &format!("-c{CONNECTIONS}"), &format!("-d{seconds}s")])
        .arg("--latency")
        .arg("-s")
        .arg(&script.0)
        .arg(format!("https://{addr}/validate/tier"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    let mut measured = Measured::default();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
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
    }
}

/// Table 4b; see the [module docs](self). `rounds` alternating measurements per row (the
/// median rate is shown, with the latencies of that round; the % column is the median of the
/// per-round ratios to the reference).
pub async fn throughput(requests: usize, seconds: u64, rounds: usize) {
    let tls = Tls::new();
    let (webhook, _stop_webhook) = webhook_server(&tls, false).await;
    let (static_route, _stop_static) = webhook_server(&tls, true).await;
    let (reference, _stop_reference) = reference_server(&tls).await;
    let wrk = wrk_installed();
    let client = if wrk {
        format!("wrk, {CONNECTIONS} connections, 2 threads, {seconds} s per round")
    } else {
        format!(
            "in-process hyper client (wrk not installed), {CONNECTIONS} connections, {requests} reviews per round"
        )
    };
    println!(
        "4b. Webhook throughput against a static TLS responder on the same stack ({client}, median of {rounds} alternating rounds)\n"
    );
    println!("| review | server | reviews/s | p50 (µs) | p99 (µs) | % of reference |");
    println!("|---|---|---|---|---|---|");
    let mut handler: Vec<(&str, f64)> = Vec::new();
    for operation in ["CREATE", "UPDATE"] {
        let body = review(operation).to_string();
        let mut results: [Vec<Measured>; 3] = [Vec::new(), Vec::new(), Vec::new()];
        for _ in 0..rounds.max(1) {
            for (i, addr) in [reference, static_route, webhook].into_iter().enumerate() {
                let measured = if wrk {
                    let body = body.clone();
                    tokio::task::spawn_blocking(move || self::wrk(addr, &body, seconds))
                        .await
                        .unwrap()
                } else {
                    in_process(addr, &tls, &body, requests).await
                };
                results[i].push(measured);
            }
        }
        // The % column: the median over rounds of each round's rate against the reference's
        // in the same round, so that load from elsewhere that changes between rounds cancels.
        let ratios: Vec<f64> = (0..3)
            .map(|i| {
                let mut r: Vec<f64> = results[i]
                    .iter()
                    .zip(&results[0])
                    .map(|(m, reference)| 100.0 * m.rate / reference.rate.max(f64::EPSILON))
                    .collect();
                crate::median(&mut r)
            })
            .collect();
        let median = |runs: &mut Vec<Measured>| {
            runs.sort_by(|a, b| a.rate.total_cmp(&b.rate));
            runs[runs.len() / 2]
        };
        let reference_rate = median(&mut results[0]);
        let static_rate = median(&mut results[1]);
        let tierd = median(&mut results[2]);
        for ((name, m), ratio) in [
            ("reference", reference_rate),
            ("tier-server `Server`, static axum route", static_rate),
            ("tier-server webhook", tierd),
        ]
        .into_iter()
        .zip(ratios)
        {
            println!(
                "| {operation} | {name} | {:.0} | {:.0} | {:.0} | {ratio:.0} % |",
                m.rate, m.p50, m.p99,
            );
        }
        handler.push((operation, handler_alone(&body, requests.max(1000))));
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

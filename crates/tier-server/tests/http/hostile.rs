//! Hostile clients: every kind of stalled connection is closed within its timeout (virtual
//! time), the connection caps shed instead of pausing `accept`, the HTTP limits hold, and the
//! probes and the webhook keep answering while 1,000 slowloris connections and 300 stalled
//! handshakes are held open.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use prometheus_client::registry::Registry;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::json;
use tier_core::FixedLister;
use tier_core::admission::AdmissionPolicy;
use tier_server::readiness::{CacheSynced, TIER_CACHE_SYNCED};
use tier_server::tls::CertFiles;
use tier_server::{
    BodyBudget, CertReloader, Limits, Readiness, Routes, Server, ServerMetrics, Webhook,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::client::TlsStream;

use crate::common::{Running, get, post, samples, system_tiers, temp_dir};

/// Distinct timeouts, so a test can tell which one closed a connection.
const LIMITS: Limits = Limits {
    client_hello_timeout: Duration::from_secs(1),
    handshake_timeout: Duration::from_secs(2),
    idle_timeout: Duration::from_secs(3),
    header_timeout: Duration::from_secs(4),
    body_timeout: Duration::from_secs(5),
    max_connections: 64,
    max_handshakes: 16,
    max_header_bytes: 16 * 1024,
    max_body_bytes_held: 16 * 1024 * 1024,
};

/// Probes and the webhook on one router, the webhook's cache synced.
fn router() -> Router {
    let lister = Arc::new(FixedLister::default());
    lister.set(system_tiers());
    let readiness = Readiness::new();
    readiness.register(TIER_CACHE_SYNCED, CacheSynced::new(lister.clone()));
    let webhook = Webhook::new(
        lister,
        AdmissionPolicy::antrea("system:serviceaccount:kube-system:tierd"),
        &readiness,
    );
    Routes::new(readiness).webhook(webhook).into_router()
}

fn review() -> String {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0000-1",
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

struct Tls {
    root: CertificateDer<'static>,
    reloader: Arc<CertReloader>,
}

async fn tls() -> Tls {
    let dir = temp_dir();
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let files = CertFiles::new(dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&files.cert, certified.cert.pem()).unwrap();
    std::fs::write(&files.key, certified.signing_key.serialize_pem()).unwrap();
    Tls {
        root: certified.cert.der().clone(),
        reloader: CertReloader::load(files).await.unwrap(),
    }
}

async fn tls_connect(addr: SocketAddr, root: &CertificateDer<'static>) -> TlsStream<TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root.clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(addr).await.unwrap();
    connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap()
}

/// Reads until the server closes the connection: what it sent, and the (virtual) time it took.
async fn until_closed<S: AsyncRead + Unpin>(stream: &mut S) -> (String, Duration) {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_secs(120), stream.read(&mut buf)).await {
            Err(_) => panic!(
                "still open after 120 s; got {:?}",
                String::from_utf8_lossy(&got)
            ),
            Ok(Ok(0) | Err(_)) => return (String::from_utf8_lossy(&got).into(), start.elapsed()),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// Sends `head`, then one more header byte per second (at most 60), until the server closes.
async fn slowloris<S>(stream: S, head: &str) -> (String, Duration)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut read, mut write) = tokio::io::split(stream);
    write.write_all(head.as_bytes()).await.unwrap();
    write.write_all(b"X-Slow: ").await.unwrap();
    let trickle = tokio::spawn(async move {
        for _ in 0..60 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if write.write_all(b"a").await.is_err() {
                return;
            }
        }
    });
    let closed = until_closed(&mut read).await;
    trickle.abort();
    closed
}

/// Asserts `elapsed` is `limit`, give or take the timer's granularity.
fn within(what: &str, elapsed: Duration, limit: Duration) {
    assert!(
        elapsed >= limit && elapsed < limit + Duration::from_millis(500),
        "{what}: closed after {elapsed:?}, limit {limit:?}"
    );
}

/// A slow head is closed `header_timeout` after its first byte also when the idle timeout is
/// the longer one (as by default: 30 s idle, 5 s for a head), on a fresh connection and on a
/// kept-alive one, not when the idle timeout would have passed.
#[tokio::test(start_paused = true)]
async fn a_slow_head_is_held_to_the_header_timeout_not_the_longer_idle_one() {
    let limits = Limits {
        idle_timeout: Duration::from_secs(30),
        header_timeout: Duration::from_secs(4),
        ..LIMITS
    };
    let server = Running::start(Server::new(router()).limits(limits)).await;

    let stream = TcpStream::connect(server.addr).await.unwrap();
    let (got, elapsed) = slowloris(stream, "GET /livez HTTP/1.1\r\nHost: x\r\n").await;
    assert_eq!(got, "");
    within(
        "slow head on a fresh connection",
        elapsed,
        limits.header_timeout,
    );

    // One request answered, 10 s idle, then a slow head: 4 s after its first byte.
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    let n = stream.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (got, elapsed) = slowloris(stream, "GET /livez HTTP/1.1\r\nHost: x\r\n").await;
    assert_eq!(got, "");
    within("slow head after keep-alive", elapsed, limits.header_timeout);
    server.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn every_stalled_plain_connection_is_closed_within_its_timeout() {
    let server = Running::start(Server::new(router()).limits(LIMITS)).await;
    let addr = server.addr;

    // Connects and sends nothing.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let (got, elapsed) = until_closed(&mut silent).await;
    assert_eq!(got, "");
    within("silent", elapsed, LIMITS.idle_timeout);

    // Headers at one byte per second.
    let stream = TcpStream::connect(addr).await.unwrap();
    let (got, elapsed) = slowloris(stream, "GET /livez HTTP/1.1\r\nHost: x\r\n").await;
    assert_eq!(got, "");
    within("slow headers", elapsed, LIMITS.header_timeout);

    // Declares 1000 bytes of body and sends 5.
    let mut short = TcpStream::connect(addr).await.unwrap();
    short
        .write_all(b"POST /validate/tier HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"a\":")
        .await
        .unwrap();
    let (got, elapsed) = until_closed(&mut short).await;
    assert!(got.starts_with("HTTP/1.1 408"), "{got}");
    within("short body", elapsed, LIMITS.body_timeout);

    // A chunked body that never ends.
    let mut chunked = TcpStream::connect(addr).await.unwrap();
    chunked
        .write_all(b"POST /validate/tier HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n")
        .await
        .unwrap();
    let (got, elapsed) = until_closed(&mut chunked).await;
    assert!(got.starts_with("HTTP/1.1 408"), "{got}");
    within("unfinished chunked body", elapsed, LIMITS.body_timeout);

    // A body the handler does not read: answered, then closed at the latest when idle.
    let mut unread = TcpStream::connect(addr).await.unwrap();
    unread
        .write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nhello")
        .await
        .unwrap();
    let (got, elapsed) = until_closed(&mut unread).await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(elapsed <= LIMITS.idle_timeout, "{elapsed:?}");

    // Keep-alive: one request, then silence.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    let n = idle.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    let (got, elapsed) = until_closed(&mut idle).await;
    assert_eq!(got, "");
    within("idle keep-alive", elapsed, LIMITS.idle_timeout);

    server.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn every_stalled_tls_connection_is_closed_within_its_timeout() {
    let tls = tls().await;
    let metrics = ServerMetrics::default();
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let server = Running::start(
        Server::new(router())
            .tls(tls.reloader.server_config().unwrap())
            .limits(LIMITS)
            .name("webhook")
            .metrics(metrics),
    )
    .await;
    let addr = server.addr;

    // TCP, no ClientHello.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let (_, elapsed) = until_closed(&mut silent).await;
    within("no ClientHello", elapsed, LIMITS.client_hello_timeout);

    // Half a ClientHello: a record header announcing 512 bytes, then one byte.
    let mut half = TcpStream::connect(addr).await.unwrap();
    half.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .await
        .unwrap();
    let (_, elapsed) = until_closed(&mut half).await;
    within("half a ClientHello", elapsed, LIMITS.client_hello_timeout);

    // Not TLS at all: refused at once.
    let mut plain = TcpStream::connect(addr).await.unwrap();
    plain
        .write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let (_, elapsed) = until_closed(&mut plain).await;
    assert!(elapsed < Duration::from_millis(100), "{elapsed:?}");

    // A handshake, then silence.
    let mut silent = tls_connect(addr, &tls.root).await;
    let (_, elapsed) = until_closed(&mut silent).await;
    within("TLS, then silence", elapsed, LIMITS.idle_timeout);

    // A handshake, then headers at one byte per second.
    let stream = tls_connect(addr, &tls.root).await;
    let (_, elapsed) = slowloris(stream, "POST /validate/tier HTTP/1.1\r\nHost: x\r\n").await;
    within("TLS slow headers", elapsed, LIMITS.header_timeout);

    // A handshake, then a body that never completes: 408.
    let mut short = tls_connect(addr, &tls.root).await;
    short
        .write_all(b"POST /validate/tier HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
        .await
        .unwrap();
    let (got, elapsed) = until_closed(&mut short).await;
    assert!(got.starts_with("HTTP/1.1 408"), "{got}");
    within("TLS short body", elapsed, LIMITS.body_timeout);

    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let samples = samples(&text);
    let failures = |reason: &str| {
        samples
            .get(&format!(
                "tierd_tls_handshake_failures_total{{server=\"webhook\",reason=\"{reason}\"}}"
            ))
            .cloned()
    };
    assert_eq!(
        failures("client_hello_timeout").as_deref(),
        Some("2"),
        "{text}"
    );
    assert_eq!(failures("error").as_deref(), Some("1"), "{text}");
    let closed = |reason: &str| {
        samples
            .get(&format!(
                "tierd_http_connections_closed_total{{server=\"webhook\",reason=\"{reason}\"}}"
            ))
            .cloned()
    };
    assert_eq!(closed("idle_timeout").as_deref(), Some("1"), "{text}");
    assert_eq!(closed("header_timeout").as_deref(), Some("1"), "{text}");
    assert_eq!(closed("body_timeout").as_deref(), Some("1"), "{text}");

    server.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_full_server_sheds_the_longest_waiting_connection_instead_of_pausing_accept() {
    let server = Running::start(Server::new(router()).limits(LIMITS)).await;
    let mut held = Vec::new();
    for _ in 0..LIMITS.max_connections {
        held.push(TcpStream::connect(server.addr).await.unwrap());
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let start = Instant::now();
    assert_eq!(get(server.addr, "/livez").await.status, StatusCode::OK);
    assert!(start.elapsed() < Duration::from_millis(100));
    let reply = post(server.addr, "/validate/tier", review()).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(reply.json()["response"]["allowed"], true);
    // The two oldest were shed at once; the newest are still open.
    for stream in &mut held[..2] {
        let (_, elapsed) = until_closed(stream).await;
        assert!(elapsed < Duration::from_millis(100), "{elapsed:?}");
    }
    let mut newest = held.pop().unwrap();
    let mut buf = [0u8; 1];
    assert!(
        tokio::time::timeout(Duration::from_millis(100), newest.read(&mut buf))
            .await
            .is_err()
    );
    server.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn pending_handshakes_beyond_the_cap_shed_the_oldest() {
    let tls = tls().await;
    let server = Running::start(
        Server::new(router())
            .tls(tls.reloader.server_config().unwrap())
            .limits(LIMITS),
    )
    .await;
    let mut stalled = Vec::new();
    for _ in 0..LIMITS.max_handshakes {
        stalled.push(TcpStream::connect(server.addr).await.unwrap());
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // A real client gets through at once, and the oldest stalled handshake is gone.
    let mut client = tls_connect(server.addr, &tls.root).await;
    client
        .write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let (got, elapsed) = until_closed(&mut client).await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(elapsed < Duration::from_millis(100), "{elapsed:?}");
    let (_, elapsed) = until_closed(&mut stalled[0]).await;
    assert!(elapsed < Duration::from_millis(100), "{elapsed:?}");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn oversized_heads_and_bodies_and_smuggling_are_refused() {
    let server = Running::start(Server::new(router()).limits(LIMITS)).await;
    let exchange = |request: Vec<u8>| async move {
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        stream.write_all(&request).await.unwrap();
        let (got, _) = until_closed(&mut stream).await;
        got
    };
    // A head larger than max_header_bytes: 431.
    let big = format!(
        "GET /livez HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(LIMITS.max_header_bytes)
    );
    let got = exchange(big.into_bytes()).await;
    assert!(got.starts_with("HTTP/1.1 431"), "{got}");
    // A URI longer than the head limit: 414 or 431, never served.
    let long = format!(
        "GET /livez?{} HTTP/1.1\r\nHost: x\r\n\r\n",
        "a".repeat(70_000)
    );
    let got = exchange(long.into_bytes()).await;
    assert!(
        got.starts_with("HTTP/1.1 414") || got.starts_with("HTTP/1.1 431"),
        "{got}"
    );
    // Both Content-Length and Transfer-Encoding: refused, nothing smuggled.
    let smuggled = b"POST /validate/tier HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /livez HTTP/1.1\r\nHost: x\r\n\r\n".to_vec();
    let got = exchange(smuggled).await;
    assert!(got.starts_with("HTTP/1.1 400"), "{got}");
    assert_eq!(got.matches("HTTP/1.1").count(), 1, "{got}");
    // A body over the webhook's limit: 413.
    let body = "a".repeat(8 * 1024 * 1024);
    let reply = post(server.addr, "/validate/tier", body).await;
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    server.stop().await.unwrap();
}

/// Connections each holding a body one byte short of its Content-Length: the bytes held stay
/// within the server's body budget (its counter, not RSS), the connections beyond it get
/// `503` after a short wait, a Tier review still gets in (its few KiB are within the free
/// allowance), and everything held is given back when the holders time out.
#[tokio::test(start_paused = true)]
async fn bodies_held_one_byte_short_stay_within_the_body_budget() {
    const CONNECTIONS: usize = 12;
    const BODY: usize = 64 * 1024;
    const BUDGET: usize = 256 * 1024;
    let budget = BodyBudget::new(BUDGET);
    let server = Running::start(
        Server::new(router())
            .limits(LIMITS)
            .body_budget(budget.clone()),
    )
    .await;
    let mut holders = Vec::new();
    for _ in 0..CONNECTIONS {
        let addr = server.addr;
        holders.push(tokio::spawn(async move {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            let head = format!(
                "POST /validate/tier HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {BODY}\r\n\r\n"
            );
            stream.write_all(head.as_bytes()).await.unwrap();
            stream.write_all(&vec![b' '; BODY - 1]).await.unwrap();
            until_closed(&mut stream).await
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let held = budget.held();
    assert!(held <= BUDGET, "{held} held");
    // Each body is charged beyond its free 16 KiB: the budget is really in use.
    let charged = BODY - LIMITS.max_header_bytes;
    assert!(held + charged > BUDGET, "only {held} held");

    // A review during the attack: within its allowance, answered at once.
    let start = Instant::now();
    let reply = post(server.addr, "/validate/tier", review()).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert!(start.elapsed() < Duration::from_millis(100));

    let mut refused = 0;
    let mut timed_out = 0;
    for holder in holders {
        let (got, elapsed) = holder.await.unwrap();
        if got.starts_with("HTTP/1.1 503") {
            assert!(got.contains("retry-after: 1"), "{got}");
            assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
            refused += 1;
        } else {
            assert!(got.starts_with("HTTP/1.1 408"), "{got}");
            timed_out += 1;
        }
    }
    assert_eq!(timed_out, BUDGET / charged, "held to the body timeout");
    assert_eq!(refused, CONNECTIONS - timed_out);
    assert!(budget.peak() <= BUDGET, "peak {}", budget.peak());
    assert_eq!(budget.held(), 0, "everything given back");
    server.stop().await.unwrap();
}

/// The open-file limit of this process, from /proc (Linux); `None` elsewhere.
fn open_file_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// 1,000 slowloris connections (700 on the plain probe port, 300 over TLS on the webhook
/// port) and 300 stalled handshakes, against caps of 512 connections and 128 handshakes per
/// port: `/livez` and an AdmissionReview keep answering. Latency and memory under the same
/// attack are measured by `tier-bench --only hostile`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_and_reviews_answer_while_attackers_hold_the_caps() {
    // Client and server ends of 1,300 connections, plus the runtime's own descriptors.
    if let Some(limit) = open_file_limit() {
        assert!(
            limit >= 3000,
            "this test opens 2,600 sockets; raise the open-file limit (ulimit -n 4096), it is {limit}"
        );
    }
    let limits = Limits {
        max_connections: 512,
        max_handshakes: 128,
        ..Limits::default()
    };
    let tls = tls().await;
    let metrics = ServerMetrics::default();
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let probes = Running::start(
        Server::new(router())
            .limits(limits)
            .name("probes")
            .metrics(metrics.clone()),
    )
    .await;
    let webhook = Running::start(
        Server::new(router())
            .tls(tls.reloader.server_config().unwrap())
            .limits(limits)
            .name("webhook")
            .metrics(metrics),
    )
    .await;

    let mut held_plain = Vec::new();
    for _ in 0..700 {
        let mut stream = TcpStream::connect(probes.addr).await.unwrap();
        stream
            .write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            .await
            .unwrap();
        held_plain.push(stream);
    }
    let mut held_tls = Vec::new();
    for _ in 0..300 {
        let mut stream = tls_connect(webhook.addr, &tls.root).await;
        stream
            .write_all(b"POST /validate/tier HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            .await
            .unwrap();
        held_tls.push(stream);
    }
    let mut stalled = Vec::new();
    for _ in 0..300 {
        stalled.push(TcpStream::connect(webhook.addr).await.unwrap());
    }

    let webhook_ok =
        |reply: &str| reply.starts_with("HTTP/1.1 200") && reply.contains("\"allowed\":true");
    for _ in 0..20 {
        assert_eq!(get(probes.addr, "/livez").await.status, StatusCode::OK);
        let mut client = tls_connect(webhook.addr, &tls.root).await;
        let body = review();
        let request = format!(
            "POST /validate/tier HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        client.write_all(request.as_bytes()).await.unwrap();
        let (reply, _) = until_closed(&mut client).await;
        assert!(webhook_ok(&reply), "{reply}");
    }

    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let samples = samples(&text);
    let shed = |key: &str| -> u64 { samples.get(key).map_or(0, |v| v.parse().unwrap()) };
    // 700 slowloris + 20 probes on 512 slots; 600 connections and 128 handshake slots on the
    // webhook port.
    assert!(
        shed("tierd_http_connections_closed_total{server=\"probes\",reason=\"shed\"}") >= 700 - 512,
        "{text}"
    );
    assert!(
        shed("tierd_http_connections_closed_total{server=\"webhook\",reason=\"shed\"}")
            >= 600 - 512,
        "{text}"
    );
    drop((held_plain, held_tls, stalled));
    probes.stop().await.unwrap();
    webhook.stop().await.unwrap();
}

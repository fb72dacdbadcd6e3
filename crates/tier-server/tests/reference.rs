//! The metric list of `docs/REFERENCE.md` is rendered from the live registry, registered as
//! `tierd run` registers it (the Tier collector, the connection metrics, the certificate expiry),
//! after traffic that gives every family a sample: a Tier that converged, a shed connection and
//! a failed TLS handshake. The readiness table is rendered from `Readiness::standard` and the
//! checks each webhook operation declares. Each table sits between
//! `<!-- BEGIN generated: NAME -->` and `<!-- END generated: NAME -->` (NAME: `metrics`,
//! `readiness`); `TIERD_BLESS=1 cargo test -p tier-server --test reference` rewrites them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use kube_core::admission::Operation;
use prometheus_client::registry::Registry;
use tier_core::{FixedLister, OutcomeCounts, Status, TierState, TierStatus};
use tier_server::conn::Limits;
use tier_server::metrics;
use tier_server::readiness::{
    ACNP_CACHE_SYNCED, ANNP_CACHE_SYNCED, CacheSynced, LEADER_ELECTION, SHUTDOWN, SYSTEM_TIERS,
    TIER_CACHE_SYNCED,
};
use tier_server::readiness::{CheckKind, Readiness, Shutdown};
use tier_server::server::{Server, ServerMetrics};
use tier_server::tls::CertFiles;
use tier_server::tls::CertReloader;
use tier_server::webhook::Webhook;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

fn reference_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/REFERENCE.md")
}

/// One converged Tier, initialized one second after the start.
fn status() -> Status {
    let start = Instant::now();
    Status {
        synced: true,
        initialized: true,
        tiers: vec![TierStatus {
            name: "baseline".into(),
            state: TierState::Converged,
            outcomes: OutcomeCounts::default(),
            corrections: 0,
            contested: false,
            converged_at: Some(start),
            last_write: None,
            held: None,
        }],
        started_at: Some(start),
        initialized_at: Some(start + Duration::from_secs(1)),
        ..Status::default()
    }
}

/// A self-signed certificate for `localhost`, loaded from files.
async fn reloader() -> Arc<CertReloader> {
    let dir = std::env::temp_dir().join(format!("tier-server-reference-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let files = CertFiles::new(dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&files.cert, certified.cert.pem()).unwrap();
    std::fs::write(&files.key, certified.signing_key.serialize_pem()).unwrap();
    let reloader = CertReloader::load(files).await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    reloader
}

fn scrape(registry: &Registry) -> String {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    text
}

/// Polls the registry until `ready` holds (bounded: 10 s of 5 ms polls).
async fn until(registry: &Registry, ready: impl Fn(&str) -> bool) {
    for _ in 0..2000 {
        if ready(&scrape(registry)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!(
        "the registry never showed the samples:\n{}",
        scrape(registry)
    );
}

/// The registry of `tierd run`, after traffic that gives every family a sample.
async fn live_registry() -> (Registry, Vec<oneshot::Sender<()>>) {
    let (_tx, rx) = tokio::sync::watch::channel(status());
    let mut registry = Registry::default();
    metrics::register(&mut registry, rx);
    let server_metrics = ServerMetrics::default();
    server_metrics.register(&mut registry);
    let tls = reloader().await;
    tls.register(&mut registry);

    let limits = Limits {
        max_connections: 1,
        ..Limits::default()
    };
    let mut stops = Vec::new();
    let mut start = |server: Server| {
        let (stop, stopped) = oneshot::channel::<()>();
        stops.push(stop);
        async move {
            let listener = tier_server::server::bind(([127, 0, 0, 1], 0).into())
                .await
                .unwrap();
            let addr = listener.local_addr().unwrap();
            tokio::spawn(server.serve(listener, async {
                let _ = stopped.await;
            }));
            addr
        }
    };
    let plain = start(
        Server::new(Router::new())
            .name("probes")
            .limits(limits)
            .metrics(server_metrics.clone()),
    )
    .await;
    let secure = start(
        Server::new(Router::new())
            .name("webhook")
            .metrics(server_metrics.clone())
            .tls(tls.server_config().unwrap()),
    )
    .await;
    // A second connection beyond `max_connections: 1` sheds the first.
    let _first = TcpStream::connect(plain).await.unwrap();
    until(&registry, |t| t.contains("tierd_http_connections{")).await;
    let _second = TcpStream::connect(plain).await.unwrap();
    // Bytes that are no ClientHello fail the handshake.
    let mut garbage = TcpStream::connect(secure).await.unwrap();
    garbage.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
    let _ = garbage.read(&mut [0; 64]).await;
    until(&registry, |t| {
        t.contains("tierd_http_connections_closed_total{")
            && t.contains("tierd_tls_handshake_failures_total{")
    })
    .await;
    (registry, stops)
}

/// Per metric family: its type, help and label names, from the OpenMetrics text.
#[derive(Default)]
struct Family {
    kind: String,
    help: String,
    labels: Vec<String>,
    samples: Vec<String>,
}

fn families(text: &str) -> BTreeMap<String, Family> {
    let mut out: BTreeMap<String, Family> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap();
            out.entry(name.to_owned()).or_default().help = help.to_owned();
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            out.entry(name.to_owned()).or_default().kind = kind.to_owned();
        } else if !line.starts_with('#') && !line.is_empty() {
            let (series, _) = line.rsplit_once(' ').unwrap();
            let (sample, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let family = out
                .iter_mut()
                .filter(|(name, _)| sample.starts_with(name.as_str()))
                .max_by_key(|(name, _)| name.len())
                .map(|(_, f)| f)
                .unwrap_or_else(|| panic!("a sample of no family: {line}"));
            if !family.samples.iter().any(|s| s == sample) {
                family.samples.push(sample.to_owned());
            }
            for pair in labels.split(',').filter(|p| !p.is_empty()) {
                let (label, _) = pair.split_once('=').unwrap();
                if !family.labels.iter().any(|l| l == label) {
                    family.labels.push(label.to_owned());
                }
            }
        }
    }
    out
}

/// The metric table: the name a scraper queries (a counter's `_total` sample), type, labels,
/// help.
fn table(text: &str) -> String {
    let mut out = String::from("| metric | type | labels | meaning |\n|---|---|---|---|\n");
    for (name, family) in families(text) {
        let sample = family
            .samples
            .iter()
            .find(|s| s.ends_with("_total"))
            .cloned()
            .unwrap_or(name);
        let labels: Vec<String> = family.labels.iter().map(|l| format!("`{l}`")).collect();
        out.push_str(&format!(
            "| `{sample}` | {} | {} | {} |\n",
            family.kind,
            labels.join(", "),
            family.help.replace('|', "\\|")
        ));
    }
    out
}

/// What each check means; a check without a row here fails the test.
fn passes_when(name: &str) -> &'static str {
    match name {
        TIER_CACHE_SYNCED => {
            "the Tier cache completed its first list; until then the reason carries the watch's \
             last error (a missing CRD, RBAC)"
        }
        SHUTDOWN => "no SIGTERM/SIGINT yet: it fails the moment one arrives",
        SYSTEM_TIERS => {
            "every desired Tier converged at least once (latched); until then the reason names \
             each Tier not converged and why"
        }
        ACNP_CACHE_SYNCED => {
            "the Antrea ClusterNetworkPolicy cache listed, or found its CRD not installed"
        }
        ANNP_CACHE_SYNCED => {
            "the Antrea NetworkPolicy cache listed, or found its CRD not installed"
        }
        LEADER_ELECTION => {
            "this replica leads (holds the Lease, or the embedder's signal says so); on standby \
             the reason names the holder. Never fails `/readyz`: a standby serves the webhook"
        }
        other => panic!("describe the readiness check {other:?} in passes_when"),
    }
}

/// The readiness table: every check of `Readiness::standard` and every check a webhook
/// operation declares.
fn readiness_table() -> String {
    let (_tx, status) = tokio::sync::watch::channel(Status::default());
    let standard = Readiness::standard(
        status,
        CacheSynced::new(Arc::new(FixedLister::default())),
        &Shutdown::new(),
    );
    let operations = [Operation::Create, Operation::Update, Operation::Delete];
    let mut names: Vec<String> = standard.names();
    // Registered by the assembly with leader election on, informational.
    names.push(LEADER_ELECTION.to_owned());
    for operation in &operations {
        for name in Webhook::requires(operation) {
            if !names.iter().any(|n| n == name) {
                names.push((*name).to_owned());
            }
        }
    }
    let mut out = String::from(
        "| check | in `Readiness::standard` | the webhook needs it for | passes when |\n\
         |---|---|---|---|\n",
    );
    for name in names {
        let kind = match standard.kind(&name) {
            Some(CheckKind::Required) => "required",
            Some(CheckKind::Informational) => "informational",
            None if name == LEADER_ELECTION => {
                "no: registered (informational) by tierd with leader election on"
            }
            None => "no: registered by whoever starts the cache",
        };
        let needed: Vec<String> = operations
            .iter()
            .filter(|op| Webhook::requires(op).contains(&name.as_str()))
            .map(|op| format!("{op:?}").to_uppercase())
            .collect();
        out.push_str(&format!(
            "| `{name}` | {kind} | {} | {} |\n",
            needed.join(", "),
            passes_when(&name)
        ));
    }
    out
}

/// `text` with the section `name` replaced by `body`, or `None` without its markers.
fn splice(text: &str, name: &str, body: &str) -> Option<String> {
    let begin = format!("<!-- BEGIN generated: {name} -->\n");
    let end = format!("<!-- END generated: {name} -->");
    let from = text.find(&begin)? + begin.len();
    let to = text.find(&end)?;
    (from <= to).then(|| format!("{}{body}{}", &text[..from], &text[to..]))
}

/// Compares the sections with `docs/REFERENCE.md`, or rewrites them with `TIERD_BLESS=1`.
fn check_or_bless(sections: &[(&str, String)]) {
    let path = reference_path();
    let text = std::fs::read_to_string(&path).unwrap();
    let mut spliced = text.clone();
    for (name, body) in sections {
        spliced = splice(&spliced, name, body).unwrap_or_else(|| {
            panic!(
                "{} lacks the lines `<!-- BEGIN generated: {name} -->` and \
                 `<!-- END generated: {name} -->`; add them, then run \
                 `TIERD_BLESS=1 cargo test -p tier-server --test reference`",
                path.display()
            )
        });
    }
    if std::env::var_os("TIERD_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, spliced).unwrap();
        return;
    }
    let first = text
        .lines()
        .zip(spliced.lines())
        .find(|(old, new)| old != new)
        .map(|(old, new)| format!("\n  docs: {old}\n  code: {new}"))
        .unwrap_or_default();
    assert!(
        spliced == text,
        "{} differs from the code;{first}\n\
         run `TIERD_BLESS=1 cargo test -p tier-server --test reference` and commit the result",
        path.display()
    );
}

/// One test for both sections, so that blessing writes the file once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metric_list_and_readiness_checks_in_docs_reference_match_the_code() {
    let (registry, stops) = live_registry().await;
    let metrics = table(&scrape(&registry));
    for stop in stops {
        let _ = stop.send(());
    }
    check_or_bless(&[("metrics", metrics), ("readiness", readiness_table())]);
}

#[test]
fn families_take_label_names_from_samples_and_counters_their_total() {
    let text = "# HELP tierd_a Things.\n# TYPE tierd_a counter\ntierd_a_total{x=\"1\",y=\"2\"} 3\n\
                # HELP tierd_a_b Other.\n# TYPE tierd_a_b gauge\ntierd_a_b 1\n# EOF\n";
    assert_eq!(
        table(text),
        "| metric | type | labels | meaning |\n|---|---|---|---|\n\
         | `tierd_a_total` | counter | `x`, `y` | Things. |\n\
         | `tierd_a_b` | gauge |  | Other. |\n"
    );
}

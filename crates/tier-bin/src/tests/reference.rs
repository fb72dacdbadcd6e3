//! The generated tables of `docs/REFERENCE.md`, each rendered from the code's own list, in one
//! place (one splice, one bless):
//!
//! | section | rendered from |
//! |---|---|
//! | `flags NAME` (`global`, each subcommand) | the clap definition (`cli.rs`) |
//! | `readiness` | the checks `tierd run`'s assembly registers (`Tierd::readiness`), for each controller and the flags that add one, and `Webhook::requires` |
//! | `events` | `tier_kube::events::to_event` for every `TierEvent`, `tier_kube::events::bad_certificate`, checked against `tier_kube::events::REASONS` |
//! | `metrics` | `/metrics` of `tierd run`'s assembly (`daemon::metrics_registry` and `Tierd::metrics`), after traffic that gives every family a sample |
//!
//! Each table sits between `<!-- BEGIN generated: NAME -->` and `<!-- END generated: NAME -->`;
//! `TIERD_BLESS=1 cargo test -p tier-bin reference` rewrites them. A check, Event reason, metric
//! or flag the code gains shows up as a difference (and a check without a description fails).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{ArgAction, CommandFactory, Parser};
use kube::core::admission::Operation;
use kube::runtime::events::EventType;
use rustls::pki_types::{CertificateDer, ServerName};
use tier_core::calico::Calico;
use tier_core::{Antrea, OutcomeCounts, Status, TierEvent, TierState, TierStatus};
use tier_kube::lease::LeaderEvent;
use tier_server::conn::Limits;
use tier_server::readiness::{
    ACNP_CACHE_SYNCED, ANNP_CACHE_SYNCED, CheckKind, LEADER_ELECTION, SHUTDOWN, SYSTEM_TIERS,
    TIER_CACHE_SYNCED, TIERS_UNOBSTRUCTED,
};
use tier_server::server::{Server, ServerMetrics};
use tier_server::tls::{CertFiles, CertReloader, ClientAuth};
use tier_server::webhook::Webhook;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

use crate::cli::{Cli, Command, ControllerKind, RunArgs};
use crate::controller::ControllerMode;
use crate::daemon;

/// The file holding the tables.
fn reference_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/REFERENCE.md")
}

/// One table cell: whitespace collapsed, `|` escaped.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

// ---------------------------------------------------------------------------------------------
// Flags

/// The table of `args`: flag, env, default, help.
fn flag_table<'a>(args: impl Iterator<Item = &'a clap::Arg>) -> String {
    let mut out = String::from("| flag | env | default | meaning |\n|---|---|---|---|\n");
    for arg in args {
        let id = arg.get_id().as_str();
        if id == "help" || id == "version" || arg.is_positional() {
            continue;
        }
        let takes_value = !matches!(
            arg.get_action(),
            ArgAction::SetTrue | ArgAction::SetFalse | ArgAction::Count
        );
        let mut flag = String::new();
        if let Some(short) = arg.get_short() {
            flag.push_str(&format!("-{short}, "));
        }
        if let Some(long) = arg.get_long() {
            flag.push_str(&format!("--{long}"));
        }
        if takes_value {
            let values = arg.get_possible_values();
            if values.is_empty() {
                let names = arg
                    .get_value_names()
                    .map(|n| n.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" "))
                    .unwrap_or_else(|| id.to_uppercase());
                flag.push_str(&format!(" {names}"));
            } else {
                let names: Vec<&str> = values.iter().map(|v| v.get_name()).collect();
                flag.push_str(&format!(" {}", names.join("|")));
            }
        }
        let aliases = arg.get_all_aliases().unwrap_or_default();
        let mut flag = format!("`{}`", cell(&flag).replace("\\|", "|"));
        if !aliases.is_empty() {
            let aliases: Vec<String> = aliases.iter().map(|a| format!("`--{a}`")).collect();
            flag.push_str(&format!(" (alias {})", aliases.join(", ")));
        }
        let env = arg
            .get_env()
            .map(|e| format!("`{}`", e.to_string_lossy()))
            .unwrap_or_default();
        let default = if takes_value {
            let values: Vec<String> = arg
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .filter(|v| !v.is_empty())
                .collect();
            if values.is_empty() {
                String::new()
            } else {
                format!("`{}`", values.join(","))
            }
        } else {
            String::new()
        };
        let help = arg
            .get_long_help()
            .or_else(|| arg.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        // Clap drops the full stop of a one-paragraph doc comment; the table keeps it.
        let mut help = cell(&help);
        if !help.ends_with('.') {
            help.push('.');
        }
        out.push_str(&format!(
            "| {} | {env} | {default} | {help} |\n",
            flag.replace('|', "\\|"),
        ));
    }
    out
}

/// Every flag section: (`flags NAME`, table).
fn flag_sections() -> Vec<(String, String)> {
    let cli = Cli::command();
    let mut out = vec![(
        "flags global".to_owned(),
        flag_table(cli.get_arguments().filter(|a| a.is_global_set())),
    )];
    for sub in cli.get_subcommands() {
        let own = sub.get_arguments().filter(|a| !a.is_global_set());
        let rendered = flag_table(own);
        if rendered.lines().count() > 2 {
            out.push((format!("flags {}", sub.get_name()), rendered));
        }
    }
    out
}

#[test]
fn every_flag_is_explained() {
    for (name, table) in flag_sections() {
        for row in table.lines().skip(2) {
            assert!(!row.ends_with("| . |"), "{name}: {row:?} has no help text");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Readiness

/// `tierd run FLAGS`'s arguments.
fn run_args(flags: &[&str]) -> RunArgs {
    let cli = Cli::try_parse_from(["tierd", "run"].iter().chain(flags)).unwrap();
    let Command::Run(args) = cli.command else {
        panic!("not run");
    };
    args
}

/// Clients of an API server that is not there: the assembly sends no request at start, and
/// what it registers does not depend on answers.
fn unreachable_clients() -> tierd::Clients {
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    tierd::Clients::from_config(config).unwrap()
}

/// What a test reads of `tierd run`'s assembly: the checks it registered, in order, and its
/// `/metrics` as `tierd run` serves it (before traffic).
struct Assembled {
    checks: Vec<(String, CheckKind)>,
    metrics: axum::Router,
    server_metrics: ServerMetrics,
}

/// `tierd run FLAGS`'s assembly, started, read and shut down; `/metrics` with `certs`'
/// certificate in service. The router keeps reading the assembly's last status.
async fn assembled(flags: &[&str], certs: &TestCerts) -> Assembled {
    async fn with<C: ControllerMode>(args: &RunArgs, certs: &TestCerts) -> Assembled {
        let desired = C::desired(&args.cluster).unwrap();
        let leadership = daemon::leadership(args).unwrap();
        let tierd = daemon::assemble::<C>(args, unreachable_clients(), desired, leadership)
            .start()
            .unwrap();
        let server_metrics = ServerMetrics::default();
        let registry = daemon::metrics_registry(&server_metrics, Some(&certs.reloader));
        let assembled = Assembled {
            checks: tierd.readiness().kinds(),
            metrics: tierd.metrics(registry),
            server_metrics,
        };
        tierd.shutdown().await;
        assembled
    }
    let args = run_args(flags);
    match args.cluster.controller {
        ControllerKind::Antrea => with::<Antrea>(&args, certs).await,
        ControllerKind::Calico => with::<Calico>(&args, certs).await,
    }
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
        TIERS_UNOBSTRUCTED => {
            "no desired Tier is blocked, denied, forbidden, not installed or contested right now \
             (not latched: after initialization too); else the reason names each such Tier and \
             why, with the server's message"
        }
        ACNP_CACHE_SYNCED => {
            "the Antrea ClusterNetworkPolicy cache listed, or found its CRD not installed"
        }
        ANNP_CACHE_SYNCED => {
            "the Antrea NetworkPolicy cache listed, or found its CRD not installed"
        }
        tierd::CONTROLLER_IDENTITY => {
            "the API server said who tierd is (SelfSubjectReview), or `--controller-user` did; \
             until then UPDATE reviews that change a priority get a retryable 503 refusal"
        }
        tierd::SERVING_CERTIFICATE => {
            "the self-signed certificate is settled (the Secret filled or checked, the files \
             written); the webhook and `/metrics` serve only after"
        }
        LEADER_ELECTION => {
            "this replica leads (holds the Lease, or the embedder's signal says so); on standby \
             the reason names the holder. Never fails `/readyz`: a standby serves the webhook"
        }
        other => panic!("describe the readiness check {other:?} in passes_when"),
    }
}

/// The readiness table: every check `tierd run` registers, for Antrea (with and without the
/// flags that add or change one) and for Calico.
async fn readiness_table(certs: &TestCerts) -> String {
    let checks = async |flags: &[&str]| assembled(flags, certs).await.checks;
    let antrea = checks(&[]).await;
    let self_signed = checks(&[
        "--self-signed-cert",
        "--tls-cert",
        "/nonexistent/tls.crt",
        "--tls-key",
        "/nonexistent/tls.key",
    ])
    .await;
    let requires_tiers = checks(&["--ready-requires-tiers"]).await;
    let calico = checks(&["--controller", "calico"]).await;
    let leader = checks(&["--leader-elect", "--pod-name", "tierd-0"]).await;
    let kind_in = |checks: &[(String, CheckKind)], name: &str| {
        checks.iter().find(|(n, _)| n == name).map(|(_, k)| *k)
    };
    let mut names: Vec<String> = Vec::new();
    for (name, _) in self_signed
        .iter()
        .chain(&calico)
        .chain(&requires_tiers)
        .chain(&leader)
    {
        if !names.contains(name) {
            names.push(name.clone());
        }
    }
    let operations = [Operation::Create, Operation::Update, Operation::Delete];
    let mut out = String::from(
        "| check | `/readyz` | registered | the webhook needs it for | passes when |\n\
         |---|---|---|---|---|\n",
    );
    for name in names {
        let words = |kind: CheckKind| match kind {
            CheckKind::Required => "required",
            CheckKind::Informational => "informational",
        };
        let first = [&antrea, &self_signed, &calico, &leader]
            .iter()
            .find_map(|checks| kind_in(checks, &name))
            .unwrap_or(CheckKind::Required);
        let mut kind = words(first).to_owned();
        if let Some(other) = kind_in(&requires_tiers, &name).filter(|k| *k != first) {
            kind.push_str(&format!("; {} with `--ready-requires-tiers`", words(other)));
        }
        let registered = match (
            kind_in(&antrea, &name).is_some(),
            kind_in(&self_signed, &name).is_some(),
            kind_in(&calico, &name).is_some(),
        ) {
            (true, _, true) => "always",
            (true, _, false) => "Antrea",
            (false, true, false) => "Antrea, with `--self-signed-cert`",
            (false, _, true) => "Calico",
            (false, _, false) if kind_in(&requires_tiers, &name).is_some() => {
                "with `--ready-requires-tiers`"
            }
            (false, _, false) => "with `--leader-elect`",
        };
        let needed: Vec<String> = operations
            .iter()
            .filter(|op| Webhook::requires(op).contains(&name.as_str()))
            .map(|op| format!("{op:?}").to_uppercase())
            .collect();
        out.push_str(&format!(
            "| `{name}` | {kind} | {registered} | {} | {} |\n",
            needed.join(", "),
            passes_when(&name)
        ));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Events

/// When each Event is published (one per episode, never per retry).
fn when(event: &TierEvent) -> &'static str {
    match event {
        TierEvent::Created { .. } => "tierd created a missing Tier",
        TierEvent::Corrected { .. } => {
            "tierd updated a drifted Tier to the desired fields (the note names those that differed)"
        }
        TierEvent::Blocked { .. } => {
            "a create is predicted to be refused (a Tier in the way); nothing is sent until it moves"
        }
        TierEvent::Denied { rule: None, .. } => {
            "admission denied a write the cache allows, four times in a row"
        }
        TierEvent::Denied { rule: Some(_), .. } => {
            "admission denied a write by a rule tierd recognises (Antrea's priority rule), at once"
        }
        TierEvent::Forbidden { .. } => "the API server answered 403/401 to a write",
        TierEvent::NotInstalled { .. } => "a create got 404: the Tier CRD is not installed",
        TierEvent::Contested { .. } => {
            "a correction found no token after another writer undid writes the server accepted"
        }
        TierEvent::ContestEnded { .. } => "the write budget is full again after a contest",
    }
}

/// One example of every [`TierEvent`] variant (the match in [`when`] fails to compile for a
/// new one; [`every_event_variant_has_an_example`] fails for a missing example).
fn examples() -> Vec<TierEvent> {
    let tier = || "networkops".to_owned();
    vec![
        TierEvent::Created { tier: tier() },
        TierEvent::Corrected {
            tier: tier(),
            fields: tier_core::Drift::of([("priority", false), ("description", true)]),
        },
        TierEvent::Blocked {
            tier: tier(),
            blockers: vec!["team-a".into()],
            reason: "priority 150 is held by Tier team-a".into(),
        },
        TierEvent::Denied {
            tier: tier(),
            message: "tier networkops priority 150 overlaps with existing Tier".into(),
            rule: None,
        },
        TierEvent::Denied {
            tier: "org-security".into(),
            message: "admission webhook \"tiervalidator.antrea.io\" denied the request: update \
                      to Tier priority is not allowed"
                .into(),
            rule: <tier_core::Antrea as tier_core::Controller>::explain_denial(
                &tier_core::TierSpec::new("org-security", 90, ""),
                Some(&tier_core::ObservedTier {
                    name: "org-security".into(),
                    priority: 95,
                    description: String::new(),
                    resource_version: "7".into(),
                    last_writer: None,
                }),
                tier_core::admission::PRIORITY_UPDATE_DENIED,
            ),
        },
        TierEvent::Forbidden {
            tier: tier(),
            permission: Some("update tiers.crd.antrea.io".into()),
            message: "forbidden".into(),
        },
        TierEvent::NotInstalled {
            tier: tier(),
            message: "the server could not find the requested resource".into(),
        },
        TierEvent::Contested {
            tier: tier(),
            streak: 4,
            by: None,
        },
        TierEvent::ContestEnded { tier: tier() },
    ]
}

#[test]
fn every_event_variant_has_an_example() {
    let mut seen = [false; 8];
    for event in examples() {
        let index = match event {
            TierEvent::Created { .. } => 0,
            TierEvent::Corrected { .. } => 1,
            TierEvent::Blocked { .. } => 2,
            TierEvent::Denied { .. } => 3,
            TierEvent::Forbidden { .. } => 4,
            TierEvent::NotInstalled { .. } => 5,
            TierEvent::Contested { .. } => 6,
            TierEvent::ContestEnded { .. } => 7,
        };
        seen[index] = true;
    }
    assert!(seen.iter().all(|s| *s), "{seen:?}");
}

/// When the elector emits each leadership change (about the Lease, in its namespace).
fn when_leader(event: &LeaderEvent) -> &'static str {
    match event {
        LeaderEvent::Acquired { .. } => {
            "this replica acquired the Lease: it writes Tiers from now on"
        }
        LeaderEvent::Lost { .. } => {
            "this replica could not renew within the renew deadline, or saw another holder: it \
             stopped writing"
        }
        LeaderEvent::Released { .. } => "this replica released the Lease on SIGTERM",
    }
}

/// One example of every leadership change.
fn leader_examples() -> Vec<LeaderEvent> {
    let identity = || "tierd-5d8f7-x2k4q_3f2a9c1e0b7d4a68".to_owned();
    vec![
        LeaderEvent::Acquired {
            identity: identity(),
        },
        LeaderEvent::Lost {
            identity: identity(),
            reason: "the Lease was not renewed within 10s".into(),
        },
        LeaderEvent::Released {
            identity: identity(),
        },
    ]
}

/// The Event table: every Event tierd publishes, about a Tier or about the certificate's
/// Secret; its reasons are exactly `tier_kube::events::REASONS`.
fn event_table() -> String {
    let about_tiers = examples().into_iter().map(|event| {
        (
            tier_kube::events::to_event(&event),
            "the Tier",
            when(&event),
        )
    });
    let certificate = (
        tier_kube::events::bad_certificate(
            "Secret kube-system/tierd-self-signed-cert: tls.crt is not signed by ca.crt; tierd \
             signed a new serving certificate with its CA"
                .to_owned(),
        ),
        "the `--self-signed-cert` Secret",
        "tierd found the certificate Secret's content bad (see docs/SECURITY.md) and replaced it",
    );
    let leadership = leader_examples().into_iter().map(|event| {
        (
            tier_kube::events::leader_election(&event),
            "the Lease (`--leader-elect`)",
            when_leader(&event),
        )
    });
    let mut out = String::from(
        "| reason | type | action | about | when | example note |\n|---|---|---|---|---|---|\n",
    );
    let mut reasons = Vec::new();
    for (rendered, about, when) in about_tiers.chain([certificate]).chain(leadership) {
        let kind = match rendered.type_ {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        };
        out.push_str(&format!(
            "| `{}` | {kind} | {} | {about} | {when} | {} |\n",
            rendered.reason,
            rendered.action,
            rendered.note.unwrap_or_default().replace('|', "\\|")
        ));
        reasons.push(rendered.reason);
    }
    let mut listed: Vec<&str> = tier_kube::events::REASONS.to_vec();
    let mut rendered: Vec<&str> = reasons.iter().map(String::as_str).collect();
    listed.sort_unstable();
    rendered.sort_unstable();
    rendered.dedup();
    assert_eq!(
        rendered, listed,
        "the Event table and tier_kube::events::REASONS disagree: add an example of the new Event"
    );
    out
}

// ---------------------------------------------------------------------------------------------
// Metrics

/// A CA, a serving certificate for `localhost` it signed (the files loaded by a
/// [`CertReloader`]) and a client CA file: the TLS of the traffic that gives every connection
/// metric a sample.
struct TestCerts {
    dir: PathBuf,
    server_der: CertificateDer<'static>,
    reloader: Arc<CertReloader>,
}

impl TestCerts {
    async fn new() -> Self {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("tier-bin-reference-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let files = CertFiles::new(dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&files.cert, certified.cert.pem()).unwrap();
        std::fs::write(&files.key, certified.signing_key.serialize_pem()).unwrap();
        let reloader = CertReloader::load(files).await.unwrap();
        std::fs::write(dir.join("client-ca.crt"), certified.cert.pem()).unwrap();
        Self {
            dir,
            server_der: certified.cert.der().clone(),
            reloader,
        }
    }

    fn client_ca(&self) -> PathBuf {
        self.dir.join("client-ca.crt")
    }
}

/// OpenMetrics text of `GET /metrics` on `router`.
async fn scrape(router: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let serving = tokio::spawn(async move { axum::serve(listener, router).await });
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: application/openmetrics-text\r\n\
          Connection: close\r\n\r\n",
    )
    .await
    .unwrap();
    let mut reply = Vec::new();
    tcp.read_to_end(&mut reply).await.unwrap();
    serving.abort();
    let reply = String::from_utf8(reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_owned()
}

/// A server on loopback until its stop is dropped or sent.
async fn start(server: Server, stops: &mut Vec<oneshot::Sender<()>>) -> std::net::SocketAddr {
    let (stop, stopped) = oneshot::channel::<()>();
    stops.push(stop);
    let listener = tier_server::server::bind(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(server.serve(listener, async {
        let _ = stopped.await;
    }));
    addr
}

/// A TLS client presenting no certificate, trusting `root`: refused by client
/// authentication.
async fn without_client_certificate(addr: std::net::SocketAddr, root: &CertificateDer<'static>) {
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
    if let Ok(mut tls) = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
    {
        let _ = tls.write_all(b"GET / HTTP/1.1\r\n\r\n").await;
        let _ = tls.read(&mut [0; 64]).await;
    }
}

/// `tierd run`'s `/metrics` after traffic that gives every connection family a sample: a shed
/// connection, a failed handshake, a refused client certificate.
async fn live_metrics(certs: &TestCerts) -> String {
    let Assembled {
        metrics: router,
        server_metrics,
        ..
    } = assembled(&[], certs).await;
    let client = ClientAuth::load(certs.client_ca(), ["kube-apiserver".to_owned()])
        .await
        .unwrap();
    let mut stops = Vec::new();
    let limits = Limits {
        max_connections: 1,
        ..Limits::default()
    };
    let server = |name| {
        Server::new(axum::Router::new())
            .name(name)
            .metrics(server_metrics.clone())
    };
    let plain = start(server("probes").limits(limits), &mut stops).await;
    let config = certs
        .reloader
        .server_config_with_client_auth(&client)
        .unwrap();
    let webhook = start(server("webhook").tls(config), &mut stops).await;
    // A second connection beyond `max_connections: 1` sheds the first.
    let _first = TcpStream::connect(plain).await.unwrap();
    until(&router, |t| t.contains("tierd_http_connections{")).await;
    let _second = TcpStream::connect(plain).await.unwrap();
    // Bytes that are no ClientHello fail the handshake; no client certificate is refused.
    let mut garbage = TcpStream::connect(webhook).await.unwrap();
    garbage.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
    let _ = garbage.read(&mut [0; 64]).await;
    without_client_certificate(webhook, &certs.server_der).await;
    let text = until(&router, |t| {
        t.contains("tierd_http_connections_closed_total{")
            && t.contains("tierd_tls_handshake_failures_total{")
            && t.contains("tierd_tls_client_certificates_rejected_total{")
    })
    .await;
    drop(stops);
    text
}

/// Scrapes `router` until `ready` holds (bounded: 10 s of 5 ms polls).
async fn until(router: &axum::Router, ready: impl Fn(&str) -> bool) -> String {
    for _ in 0..2000 {
        let text = scrape(router.clone()).await;
        if ready(&text) {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!(
        "/metrics never showed the samples:\n{}",
        scrape(router.clone()).await
    );
}

/// The Tier metrics of a status in which every desired Tier converged: the families that
/// appear only then (`tierd_converged_seconds`).
fn converged_tier_metrics() -> String {
    let start = Instant::now();
    let status = Status {
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
    };
    let (_tx, rx) = tokio::sync::watch::channel(status);
    let mut registry = prometheus_client::registry::Registry::default();
    tier_server::metrics::register(&mut registry, rx);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    text
}

/// Per metric family: its type, help and label names, from the OpenMetrics text.
#[derive(Default)]
struct Family {
    kind: String,
    help: String,
    labels: Vec<String>,
    samples: Vec<String>,
}

/// The families of every `text`, merged.
fn families<'a>(texts: impl IntoIterator<Item = &'a str>) -> BTreeMap<String, Family> {
    let mut out: BTreeMap<String, Family> = BTreeMap::new();
    for line in texts.into_iter().flat_map(str::lines) {
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
fn metric_table<'a>(texts: impl IntoIterator<Item = &'a str>) -> String {
    let mut out = String::from("| metric | type | labels | meaning |\n|---|---|---|---|\n");
    for (name, family) in families(texts) {
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

#[test]
fn families_take_label_names_from_samples_and_counters_their_total() {
    let text = "# HELP tierd_a Things.\n# TYPE tierd_a counter\ntierd_a_total{x=\"1\",y=\"2\"} 3\n\
                # HELP tierd_a_b Other.\n# TYPE tierd_a_b gauge\ntierd_a_b 1\n# EOF\n";
    let more = "# HELP tierd_a Things.\n# TYPE tierd_a counter\ntierd_a_total{z=\"1\"} 3\n";
    assert_eq!(
        metric_table([text, more]),
        "| metric | type | labels | meaning |\n|---|---|---|---|\n\
         | `tierd_a_total` | counter | `x`, `y`, `z` | Things. |\n\
         | `tierd_a_b` | gauge |  | Other. |\n"
    );
}

// ---------------------------------------------------------------------------------------------
// Splicing

/// `text` with each section's body replaced, or the names of the missing markers.
fn splice(text: &str, sections: &[(String, String)]) -> Result<String, Vec<String>> {
    let mut text = text.to_owned();
    let mut missing = Vec::new();
    for (name, body) in sections {
        let begin = format!("<!-- BEGIN generated: {name} -->\n");
        let end = format!("<!-- END generated: {name} -->");
        let (Some(start), Some(stop)) = (text.find(&begin), text.find(&end)) else {
            missing.push(name.clone());
            continue;
        };
        let from = start + begin.len();
        if stop < from {
            missing.push(name.clone());
            continue;
        }
        text.replace_range(from..stop, body);
    }
    if missing.is_empty() {
        Ok(text)
    } else {
        Err(missing)
    }
}

/// Compares the sections with `path`, or rewrites them there with `TIERD_BLESS=1`.
fn check_or_bless(path: &Path, sections: &[(String, String)]) {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let spliced = splice(&text, sections).unwrap_or_else(|missing| {
        panic!(
            "{} lacks the markers of {missing:?}: add `<!-- BEGIN generated: NAME -->` and \
             `<!-- END generated: NAME -->` lines, then run \
             `TIERD_BLESS=1 cargo test -p tier-bin reference`",
            path.display()
        )
    });
    if std::env::var_os("TIERD_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(path, spliced).unwrap();
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
        "the generated tables in {} differ from the code;{first}\n\
         run `TIERD_BLESS=1 cargo test -p tier-bin reference` and commit the result",
        path.display()
    );
}

#[test]
fn splicing_replaces_only_between_markers() {
    let text = "a\n<!-- BEGIN generated: flags x -->\nold\n<!-- END generated: flags x -->\nb\n";
    let sections = [("flags x".to_owned(), "new\n".to_owned())];
    assert_eq!(
        splice(text, &sections).unwrap(),
        "a\n<!-- BEGIN generated: flags x -->\nnew\n<!-- END generated: flags x -->\nb\n"
    );
    assert_eq!(
        splice("nothing", &sections).unwrap_err(),
        vec!["flags x".to_owned()]
    );
}

/// One test for every section, so that blessing writes the file once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_generated_tables_in_docs_reference_match_the_code() {
    let certs = TestCerts::new().await;
    let mut sections = flag_sections();
    sections.push(("readiness".to_owned(), readiness_table(&certs).await));
    sections.push(("events".to_owned(), event_table()));
    let live = live_metrics(&certs).await;
    sections.push((
        "metrics".to_owned(),
        metric_table([live.as_str(), converged_tier_metrics().as_str()]),
    ));
    let _ = std::fs::remove_dir_all(&certs.dir);
    check_or_bless(&reference_path(), &sections);
}

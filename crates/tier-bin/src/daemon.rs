//! `tierd run`: flags → [`tierd::Tierd::builder`] → serve.
//!
//! 1. Validate the input (the `--tiers` file, the `--leader-elect-*` timing, the kubeconfig,
//!    the TLS files when given): invalid input exits 2 before any request. Nothing the API server does (or fails to do)
//!    exits: the assembly learns every fact from it in the background, each behind a
//!    readiness check (see the `tierd` crate's docs).
//! 2. Bind the three listeners and serve the probes at once: `/livez` 200 from the first
//!    moment, `/readyz` 503 naming what it waits for. The webhook's port (TLS when
//!    certificates are given) and `/metrics` (localhost by default, or protected by
//!    TokenReview and SubjectAccessReview with `--metrics-auth`) serve at once too, except
//!    with `--self-signed-cert`: then they serve once the certificate is settled.
//! 3. On SIGTERM/SIGINT: readiness turns false at once, the driver stops (no write starts
//!    after it), the Lease is released with `--leader-elect` (so the standby takes over within
//!    one retry period), the servers drain, and the process exits within about a second.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;
use tier_core::DesiredSet;
use tier_kube::certs::SelfSignedConfig;
use tier_server::server::{Server, ServerMetrics};
use tier_server::tls::{CertFiles, CertReloader};
use tierd::{Clients, Events, SelfSigned, Tierd};
use tokio::task::JoinSet;

use crate::cli::RunArgs;
use crate::commands::{self, CommandError};
use crate::controller::ControllerMode;
use crate::signals;

/// How often the TLS files are checked for a new certificate.
const CERT_POLL: Duration = Duration::from_secs(10);

/// The longest the server may take to finish requests in flight after a signal.
const DRAIN_LIMIT: Duration = Duration::from_millis(800);

/// With `--self-signed-cert`: what to keep and the files to write the serving certificate to.
pub(crate) fn self_signed(args: &RunArgs) -> Option<SelfSigned> {
    let flags = &args.self_signed;
    let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) else {
        return None;
    };
    if !flags.self_signed_cert {
        return None;
    }
    let mut config = SelfSignedConfig::new(
        &flags.namespace,
        &flags.self_signed_cert_secret,
        &flags.self_signed_cert_service,
    )
    .instance(args.pod_name.clone());
    if let Some(name) = flags
        .webhook_configuration
        .as_ref()
        .filter(|n| !n.is_empty())
    {
        config = config.webhook_configuration(name);
    }
    Some(SelfSigned {
        config,
        cert: cert.clone(),
        key: key.clone(),
    })
}

/// With `--leader-elect`: the Lease, this process's identity (`--pod-name`, else $HOSTNAME,
/// else `tierd`, with a random suffix as kube-scheduler's `hostname_uuid`) and the timing,
/// checked: timing that cannot fence is invalid input.
pub(crate) fn leadership(args: &RunArgs) -> Result<tierd::Leadership, CommandError> {
    let flags = &args.leader_elect;
    if !flags.leader_elect {
        return Ok(tierd::Leadership::Always);
    }
    let base = args
        .pod_name
        .clone()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .filter(|name| !name.trim().is_empty())
        .unwrap_or_else(|| "tierd".to_owned());
    let identity = format!("{base}_{:016x}", tier_core::entropy_seed());
    let config = tier_kube::lease::ElectionConfig {
        lease_duration: flags.leader_elect_lease_duration,
        renew_deadline: flags.leader_elect_renew_deadline,
        retry_period: flags.leader_elect_retry_period,
        ..tier_kube::lease::ElectionConfig::new(
            &flags.leader_elect_resource_namespace,
            &flags.leader_elect_resource_name,
            identity,
        )
    };
    config.validate().map_err(CommandError::LeaderElection)?;
    Ok(tierd::Leadership::Lease(config))
}

/// The TLS certificate files, when given.
fn cert_files(args: &RunArgs) -> Option<CertFiles> {
    match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(CertFiles::new(cert, key)),
        _ => None,
    }
}

/// The assembly the flags select.
pub(crate) fn assemble<C: ControllerMode>(
    args: &RunArgs,
    clients: Clients,
    desired: DesiredSet<C>,
    leadership: tierd::Leadership,
) -> tierd::Builder<C> {
    let builder = Tierd::builder(clients, desired)
        .leadership(leadership)
        .writer_config(commands::writer_config(&args.cluster))
        .events(Events::Kubernetes {
            instance: args.pod_name.clone(),
        })
        .metrics_auth(args.metrics_auth)
        .ready_requires_tiers(args.ready_requires_tiers);
    C::configure(builder, args)
}

/// The registry `/metrics` serves, before [`Tierd::metrics`] adds the assembly's own: the
/// connection metrics of every server and, with TLS, the certificate's expiry.
pub(crate) fn metrics_registry(
    server_metrics: &ServerMetrics,
    tls: Option<&Arc<CertReloader>>,
) -> Registry {
    let mut registry = Registry::default();
    server_metrics.register(&mut registry);
    if let Some(tls) = tls {
        tls.register(&mut registry);
    }
    registry
}

/// A finished server task's outcome.
fn ended(
    result: Result<Result<(), CommandError>, tokio::task::JoinError>,
) -> Result<(), CommandError> {
    match result {
        Ok(outcome) => outcome,
        Err(e) => Err(CommandError::Task(e.to_string())),
    }
}

/// Runs the daemon until a signal; see the module docs.
///
/// # Errors
///
/// Invalid input (exit 2), a listener that cannot be bound or a server that failed (exit 1);
/// never the API server.
pub async fn run<C: ControllerMode>(args: &RunArgs) -> Result<(), CommandError> {
    // Every refused flag first, in one message; then the `--tiers` file.
    let webhook_listen = C::webhook_listen(args)?;
    let leadership = leadership(args)?;
    let desired = C::desired(&args.cluster)?;
    let clients = commands::clients(&args.cluster).await?;
    let self_signed = self_signed(args);
    // Given files are input: unreadable or invalid exits 2 now. Self-signed ones are written
    // by tierd once the certificate is settled.
    let mut tls = match (&self_signed, cert_files(args)) {
        (None, Some(files)) => Some(CertReloader::load(files).await?),
        _ => None,
    };
    // Only the webhook port asks for client certificates (probes stay plain for the kubelet).
    let client_auth = match &args.client_ca {
        Some(ca) => Some(tier_server::tls::ClientAuth::load(ca, args.client_names.clone()).await?),
        None => None,
    };
    // `--webhook-listen ""`: no webhook port (beside Antrea nothing calls it); none for a
    // controller without a webhook.
    let webhook_listener = match webhook_listen {
        Some(addr) => Some(tier_server::server::bind(addr).await?),
        None => None,
    };
    let probe_listener = tier_server::server::bind(args.probe_listen).await?;
    let metrics_listener = tier_server::server::bind(args.metrics_listen).await?;
    if !args.metrics_auth && !args.metrics_listen.ip().is_loopback() {
        tracing::warn!(
            addr = %args.metrics_listen,
            "/metrics is served without authentication beyond localhost; add --metrics-auth"
        );
    }
    let waits_for_certificate = self_signed.is_some();
    let tierd = assemble(args, clients, desired, leadership).start()?;

    let shutdown = tierd.shutdown_signal().clone();
    let limits = args.http.limits();
    let server_metrics = ServerMetrics::default();
    let server = |router, name| {
        Server::new(router)
            .name(name)
            .limits(limits)
            .metrics(server_metrics.clone())
    };
    let mut served: JoinSet<Result<(), CommandError>> = JoinSet::new();
    let probes = server(tierd.probes(), "probes");
    let drained = shutdown.drained(Duration::ZERO);
    served.spawn(async move { Ok(probes.serve(probe_listener, drained).await?) });

    let mut signal = std::pin::pin!(signals::shutdown());
    if waits_for_certificate {
        tracing::info!(
            "the webhook and /metrics serve once the self-signed certificate is settled"
        );
    }
    let early = tokio::select! {
        () = tierd.certificate_settled() => None,
        () = &mut signal => Some(Ok(())),
        Some(result) = served.join_next() => Some(ended(result)),
    };
    let outcome = match early {
        Some(outcome) => outcome,
        None => match serve_webhook_and_metrics(
            args,
            &tierd,
            &mut tls,
            &mut served,
            server,
            &server_metrics,
            Pending {
                webhook: webhook_listener,
                metrics: metrics_listener,
                client_auth,
            },
        )
        .await
        {
            Err(error) => Err(error),
            Ok(()) => tokio::select! {
                () = &mut signal => Ok(()),
                Some(result) = served.join_next() => ended(result),
            },
        },
    };
    shutdown.trigger();
    tierd.shutdown().await;
    let drained = tokio::time::timeout(DRAIN_LIMIT, async {
        while served.join_next().await.is_some() {}
    });
    if drained.await.is_err() {
        tracing::warn!("requests still in flight after {DRAIN_LIMIT:?}; exiting anyway");
        served.abort_all();
    }
    tracing::info!("stopped");
    outcome
}

/// What the webhook and metrics servers start with, once they may.
struct Pending {
    /// The webhook's listener; none with `--webhook-listen ""`.
    webhook: Option<tokio::net::TcpListener>,
    /// The metrics listener.
    metrics: tokio::net::TcpListener,
    /// The client-certificate check of the webhook port (`--client-ca`).
    client_auth: Option<Arc<tier_server::tls::ClientAuth>>,
}

/// Starts the webhook and metrics servers (TLS when certificates are given; the self-signed
/// files are loaded now, once settled).
async fn serve_webhook_and_metrics<C: tierd::backend::Backend>(
    args: &RunArgs,
    tierd: &Tierd<C>,
    tls: &mut Option<Arc<CertReloader>>,
    served: &mut JoinSet<Result<(), CommandError>>,
    server: impl Fn(axum::Router, &'static str) -> Server,
    server_metrics: &ServerMetrics,
    Pending {
        webhook: webhook_listener,
        metrics: metrics_listener,
        client_auth,
    }: Pending,
) -> Result<(), CommandError> {
    if tls.is_none()
        && let Some(files) = cert_files(args)
    {
        *tls = Some(CertReloader::load(files).await?);
    }
    let mut webhook = server(tierd.webhook(), "webhook");
    let registry = metrics_registry(server_metrics, tls.as_ref());
    let mut metrics = server(tierd.metrics(registry), "metrics");
    let shutdown = tierd.shutdown_signal();
    if let Some(tls) = tls.as_ref() {
        let config = tls.server_config()?;
        webhook = webhook.tls(match &client_auth {
            Some(client) => tls.server_config_with_client_auth(client)?,
            None => Arc::clone(&config),
        });
        if let Some(client) = client_auth {
            let stop = shutdown.clone();
            tokio::spawn(client.watch(CERT_POLL, async move { stop.triggered().await }));
        }
        if args.metrics_auth {
            metrics = metrics.tls(config);
        }
        let stop = shutdown.clone();
        tokio::spawn(
            tls.clone()
                .watch(CERT_POLL, async move { stop.triggered().await }),
        );
    }
    // `--webhook-listen ""`: no webhook port (beside Antrea nothing calls it).
    let webhook = webhook_listener.map(|listener| (webhook, listener));
    for (server, listener) in webhook.into_iter().chain([(metrics, metrics_listener)]) {
        let drained = shutdown.drained(Duration::ZERO);
        served.spawn(async move { Ok(server.serve(listener, drained).await?) });
    }
    Ok(())
}

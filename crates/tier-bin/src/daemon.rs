//! `tierd run`: the daemon's wiring.
//!
//! Order matters (see the two dependency loops in docs/ARCHITECTURE.md):
//!
//! 1. validate the input, bind the listener and serve at once: `/livez`, `/readyz`, `/metrics`
//!    and the webhook answer from the first moment, each handler gated only on the checks it
//!    needs (the webhook on `tier-cache-synced`);
//! 2. start the Tier cache and the driver in continuous mode;
//! 3. on SIGTERM/SIGINT: readiness turns false at once, the driver stops (no write starts after
//!    it), the server drains, and the process exits within about a second.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;
use tier_core::admission::AdmissionPolicy;
use tier_core::{DesiredSet, DriverConfig, Mode, TierLister};
use tier_kube::KubeLister;
use tier_server::readiness::{CacheSynced, SYSTEM_TIERS, SystemTiers};
use tier_server::tls::{CertFiles, CertReloader};
use tier_server::{HealthConfig, Readiness, Routes, Server, Shutdown, Webhook, metrics};

use crate::cli::RunArgs;
use crate::commands::{self, CommandError};
use crate::signals;

/// How often the TLS files are checked for a new certificate.
const CERT_POLL: Duration = Duration::from_secs(10);

/// The longest the server may take to finish requests in flight after a signal.
const DRAIN_LIMIT: Duration = Duration::from_millis(800);

/// The admission policy for `desired`: its names are protected from deletion and `user` may
/// change priorities.
pub fn policy(desired: &DesiredSet, user: &str) -> AdmissionPolicy {
    AdmissionPolicy {
        protected_names: desired.tiers().iter().map(|t| t.name.clone()).collect(),
        ..AdmissionPolicy::antrea(user)
    }
}

/// The `tier-cache-synced` check on `lister`: its reason carries the watch's last error (a
/// missing CRD, missing RBAC), so `/readyz?verbose` says why.
pub fn cache_synced(lister: &KubeLister) -> CacheSynced {
    let stats = lister.clone();
    CacheSynced::new(Arc::new(lister.clone()))
        .with_last_error(move || stats.watch_stats().last_error)
}

/// The user the webhook lets change priorities: `--controller-user`, else the identity tierd's
/// own client authenticates as (its writes are the corrections the webhook must let through).
///
/// # Errors
///
/// [`CommandError::Identity`] when the flag is not set and the API server cannot say (too old
/// for SelfSubjectReview, unreachable within the call timeout): set `--controller-user`.
pub async fn controller_user(
    args: &RunArgs,
    client: &kube::Client,
) -> Result<String, CommandError> {
    if let Some(user) = &args.controller_user {
        tracing::info!(%user, "the webhook lets this user change priorities (--controller-user)");
        return Ok(user.clone());
    }
    let asked = tokio::time::timeout(
        args.cluster.call_timeout,
        tier_kube::identity::whoami(client),
    )
    .await;
    match asked {
        Ok(Ok(user)) => {
            tracing::info!(%user, "the webhook lets this user change priorities (tierd's own identity)");
            Ok(user)
        }
        Ok(Err(error)) => Err(CommandError::Identity(error)),
        Err(_) => Err(CommandError::IdentityTimeout(args.cluster.call_timeout)),
    }
}

/// Runs the daemon until a signal; see the module docs.
pub async fn run(args: &RunArgs) -> Result<(), CommandError> {
    let desired = commands::desired(&args.cluster)?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(CertReloader::load(CertFiles::new(cert, key)).await?),
        _ => None,
    };
    let listener = tier_server::server::bind(args.listen).await?;
    let (client, writer_client) = commands::clients(&args.cluster).await?;
    let lister = KubeLister::start(client.clone())?;
    let writer = lister.writer(writer_client, commands::writer_config(&args.cluster));

    let user = controller_user(args, &client).await?;
    let policy = policy(&desired, &user);
    let events_client = client.clone();
    let ensurer = tier_runtime::spawn(
        lister.clone(),
        writer,
        desired,
        DriverConfig::default(),
        Mode::Continuous,
    );
    let status = ensurer.status();
    let reporter = tier_kube::events::reporter(args.pod_name.clone());
    tokio::spawn(tier_kube::events::publish(
        events_client,
        reporter,
        status.clone(),
    ));

    let shutdown = Shutdown::new();
    let readiness = Readiness::standard(status.clone(), cache_synced(&lister), &shutdown);
    if args.ready_requires_tiers {
        readiness.register(SYSTEM_TIERS, SystemTiers(status.clone()));
    }
    let health = HealthConfig::default();
    let mut registry = Registry::default();
    metrics::register(&mut registry, status.clone());
    let cache: Arc<dyn TierLister> = Arc::new(lister);
    let router = Routes::new(readiness.clone())
        .health(health)
        .metrics(Arc::new(registry))
        .webhook(Webhook::new(cache, policy, &readiness))
        .into_router();
    let mut server = Server::new(router);
    if let Some(tls) = &tls {
        server = server.tls(tls.server_config()?);
        let stop = shutdown.clone();
        tokio::spawn(
            tls.clone()
                .watch(CERT_POLL, async move { stop.triggered().await }),
        );
    }
    let mut served = tokio::spawn(server.serve(listener, shutdown.drained(Duration::ZERO)));

    let outcome = tokio::select! {
        () = signals::shutdown() => Ok(()),
        result = &mut served => match result {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(CommandError::Serve(e)),
            Err(e) => Err(CommandError::Task(e.to_string())),
        },
    };
    shutdown.trigger();
    ensurer.shutdown().await;
    if !served.is_finished()
        && tokio::time::timeout(DRAIN_LIMIT, &mut served)
            .await
            .is_err()
    {
        tracing::warn!("requests still in flight after {DRAIN_LIMIT:?}; exiting anyway");
        served.abort();
    }
    tracing::info!("stopped");
    outcome
}

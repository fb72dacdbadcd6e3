//! `tierd run`: the daemon's wiring.
//!
//! Order matters (see the two dependency loops in docs/ARCHITECTURE.md):
//!
//! 1. validate the input; with `--self-signed-cert`, settle the certificate Secret and write the
//!    serving certificate files once (a Secret read or create never needs tierd's own webhook,
//!    whose rules cover only Tiers, so this cannot deadlock);
//!    bind the three listeners and serve at once, as controller-runtime
//!    splits them: the webhook on its own port (TLS when certificates are given), `/livez` and
//!    `/readyz` on a plain probe port, `/metrics` on a third port (localhost by default, or
//!    protected by TokenReview and SubjectAccessReview with `--metrics-auth`). Every handler
//!    answers from the first moment, gated only on the checks it needs (the webhook's CREATE
//!    and UPDATE on `tier-cache-synced`, its DELETE also on `acnp-cache-synced` and
//!    `annp-cache-synced`);
//! 2. start the Tier cache, the two policy caches and the driver in continuous mode; the
//!    driver's writer records its successful writes in the webhook's reservation table;
//! 3. on SIGTERM/SIGINT: readiness turns false at once, the driver stops (no write starts after
//!    it), the server drains, and the process exits within about a second.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use prometheus_client::registry::Registry;
use tier_core::admission::AdmissionPolicy;
use tier_core::{DesiredSet, DriverConfig, Mode, TierLister, ValidationRules};
use tier_kube::KubeLister;
use tier_kube::certs::{self, SelfSignedConfig};
use tier_kube::policies::{PolicyCache, PolicyKind};
use tier_kube::{ClusterNetworkPolicies, NetworkPolicies};
use tier_server::readiness::{
    ACNP_CACHE_SYNCED, ANNP_CACHE_SYNCED, CacheSynced, SYSTEM_TIERS, SystemTiers, from_fn,
};
use tier_server::tls::{CertFiles, CertReloader};
use tier_server::{
    Check, CheckState, HealthConfig, PolicyReferences, Readiness, ReservationTable,
    ReservingWriter, Routes, Server, ServerMetrics, Shutdown, Webhook, auth, metrics,
};
use tokio::task::JoinSet;

use crate::cli::RunArgs;
use crate::commands::{self, CommandError};
use crate::metrics_auth::KubeAuthorizer;
use crate::signals;

/// How often the TLS files are checked for a new certificate.
const CERT_POLL: Duration = Duration::from_secs(10);

/// How often `--self-signed-cert` checks the Secret, the files and the caBundle.
const SELF_SIGNED_POLL: Duration = Duration::from_secs(60);

/// The longest the server may take to finish requests in flight after a signal.
const DRAIN_LIMIT: Duration = Duration::from_millis(800);

/// The admission policy for `desired` under `rules`: Antrea's six names and every desired name
/// are protected from deletion (a custom set adds to Antrea's, never replaces them), and `user`
/// may change priorities.
pub fn policy(desired: &DesiredSet, user: &str, rules: ValidationRules) -> AdmissionPolicy {
    AdmissionPolicy::antrea(user)
        .protect(desired.tiers().iter().map(|t| t.name.clone()))
        .with_rules(rules)
}

/// The readiness check of one policy cache: passes once it listed (or found its CRD not
/// installed); until then its reason names the watch's last error.
pub fn policy_cache_synced<K: PolicyKind>(cache: PolicyCache<K>) -> impl Check {
    from_fn(move || match cache.describe() {
        Ok(_) => CheckState::Ok,
        Err(reason) => CheckState::Failed(reason),
    })
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

/// With `--self-signed-cert`: what to keep and the files to write the serving certificate to.
pub fn self_signed(args: &RunArgs) -> Option<(SelfSignedConfig, PathBuf, PathBuf)> {
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
    );
    if let Some(name) = flags
        .webhook_configuration
        .as_ref()
        .filter(|n| !n.is_empty())
    {
        config = config.webhook_configuration(name);
    }
    Some((config, cert.clone(), key.clone()))
}

/// Runs the daemon until a signal; see the module docs.
pub async fn run(args: &RunArgs) -> Result<(), CommandError> {
    let desired = commands::desired(&args.cluster)?;
    let (client, writer_client) = commands::clients(&args.cluster).await?;
    let self_signed = self_signed(args);
    if let Some((config, cert, key)) = &self_signed {
        let done = certs::reconcile(&client, config, cert, key, SystemTime::now()).await?;
        tracing::info!(
            secret = %format!("{}/{}", config.namespace, config.secret),
            action = ?done.secret,
            ca_bundle_updated = done.ca_bundle_updated,
            "self-signed serving certificate in place"
        );
    }
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(CertReloader::load(CertFiles::new(cert, key)).await?),
        _ => None,
    };
    let webhook_listener = tier_server::server::bind(args.listen).await?;
    let probe_listener = tier_server::server::bind(args.probe_listen).await?;
    let metrics_listener = tier_server::server::bind(args.metrics_listen).await?;
    if !args.metrics_auth && !args.metrics_listen.ip().is_loopback() {
        tracing::warn!(
            addr = %args.metrics_listen,
            "/metrics is served without authentication beyond localhost; add --metrics-auth"
        );
    }
    let lister = KubeLister::start(client.clone())?;
    let acnps = PolicyCache::<ClusterNetworkPolicies>::start(client.clone())?;
    let annps = PolicyCache::<NetworkPolicies>::start(client.clone())?;
    let reservations = ReservationTable::default();
    let writer = ReservingWriter::new(
        lister.writer(writer_client, commands::writer_config(&args.cluster)),
        reservations.clone(),
    );

    let user = controller_user(args, &client).await?;
    let policy = policy(&desired, &user, args.cluster.feature_gates.rules());
    let events_client = client.clone();
    let auth_client = client.clone();
    let (ensurer, events) = tier_runtime::spawn_with_events(
        lister.clone(),
        writer,
        desired,
        DriverConfig::default(),
        Mode::Continuous,
    )?;
    let status = ensurer.status();
    let reporter = tier_kube::events::reporter(args.pod_name.clone());
    tokio::spawn(tier_kube::events::publish(events_client, reporter, events));

    let shutdown = Shutdown::new();
    if let Some((config, cert, key)) = self_signed {
        let stop = shutdown.clone();
        tokio::spawn(certs::maintain(
            client.clone(),
            config,
            cert,
            key,
            SELF_SIGNED_POLL,
            async move { stop.triggered().await },
        ));
    }
    let readiness = Readiness::standard(status.clone(), cache_synced(&lister), &shutdown);
    // Informational: only the webhook's DELETE needs them (see README, "Readiness").
    readiness
        .register_informational(ACNP_CACHE_SYNCED, policy_cache_synced(acnps.clone()))
        .register_informational(ANNP_CACHE_SYNCED, policy_cache_synced(annps.clone()));
    if args.ready_requires_tiers {
        readiness.register(SYSTEM_TIERS, SystemTiers(status.clone()));
    }
    let health = HealthConfig::default();
    let mut registry = Registry::default();
    metrics::register(&mut registry, status.clone());
    let server_metrics = ServerMetrics::default();
    server_metrics.register(&mut registry);
    if let Some(tls) = &tls {
        tls.register(&mut registry);
    }
    let cache: Arc<dyn TierLister> = Arc::new(lister);
    let ports = Routes::new(readiness.clone())
        .health(health)
        .metrics(Arc::new(registry))
        .webhook(
            Webhook::new(cache, policy, &readiness)
                .policy_references(PolicyReferences::new(Arc::new(acnps), Arc::new(annps)))
                .reservations(reservations),
        )
        .into_ports();
    let limits = args.http.limits();
    let server = |router, name| {
        Server::new(router)
            .name(name)
            .limits(limits)
            .metrics(server_metrics.clone())
    };
    let mut webhook = server(ports.webhook.unwrap_or_default(), "webhook");
    let probes = server(ports.probes, "probes");
    let mut metrics_router = ports.metrics.unwrap_or_default();
    if args.metrics_auth {
        metrics_router = auth::protect(metrics_router, Arc::new(KubeAuthorizer::new(auth_client)));
    }
    let mut metrics = server(metrics_router, "metrics");
    if let Some(tls) = &tls {
        let config = tls.server_config()?;
        webhook = webhook.tls(Arc::clone(&config));
        if args.metrics_auth {
            metrics = metrics.tls(config);
        }
        let stop = shutdown.clone();
        tokio::spawn(
            tls.clone()
                .watch(CERT_POLL, async move { stop.triggered().await }),
        );
    }
    let mut served = JoinSet::new();
    for (server, listener) in [
        (webhook, webhook_listener),
        (probes, probe_listener),
        (metrics, metrics_listener),
    ] {
        served.spawn(server.serve(listener, shutdown.drained(Duration::ZERO)));
    }

    let outcome = tokio::select! {
        () = signals::shutdown() => Ok(()),
        Some(result) = served.join_next() => match result {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(CommandError::Serve(e)),
            Err(e) => Err(CommandError::Task(e.to_string())),
        },
    };
    shutdown.trigger();
    ensurer.shutdown().await;
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

#[cfg(test)]
mod tests {
    use tier_core::TierSpec;
    use tier_core::admission::{References, Request, review};

    use super::*;

    #[test]
    fn a_custom_set_adds_to_antreas_reserved_names() {
        let custom = DesiredSet::new(
            vec![
                TierSpec::new("baseline", 253, ""),
                TierSpec::new("mine", 7, ""),
            ],
            &ValidationRules::default(),
        )
        .unwrap();
        let policy = policy(&custom, "tierd", ValidationRules::default());
        for name in [
            "baseline",
            "application",
            "platform",
            "networkops",
            "securityops",
            "emergency",
            "mine",
        ] {
            let delete = Request::Delete {
                name,
                references: References::NONE,
            };
            assert_eq!(
                review(&policy, &delete, []).unwrap_err().0,
                format!("cannot delete reserved tier {name}")
            );
        }
    }
}

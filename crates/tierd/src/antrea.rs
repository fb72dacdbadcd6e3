//! Antrea's part of the assembly ([`Backend`] for [`Antrea`]): the Tier webhook with the
//! writer's reservations, the policy caches its DELETE reviews read, the controller identity
//! its UPDATE reviews need, and the self-signed certificate of its port.
//!
//! There is no way to get a webhook without the policy caches (which would refuse every
//! DELETE) or without the writer's reservations (which would let two creates at one priority
//! pass): [`Backend::start`] makes all three from one table. With priority claims
//! ([`Builder::priority_claims`](crate::Builder::priority_claims)), the webhook and the writer
//! share one [`LeaseClaims`] too, so that several replicas admit one Tier per priority.

use std::fmt;
use std::sync::Arc;

use axum::Router;
use kube::runtime::watcher;
use tier_core::admission::AdmissionPolicy;
use tier_core::{Antrea, DesiredSet, PriorityClaims, TierLister, ValidationRules};
use tier_kube::backoff::RetryBackoff;
use tier_kube::claims::{ClaimsConfig, LeaseClaims};
use tier_kube::crd::Tier;
use tier_kube::identity::{ControllerIdentity, IdentityState};
use tier_kube::lister::KubeLister;
use tier_kube::policies::{ClusterNetworkPolicies, NetworkPolicies};
use tier_kube::policies::{PolicyCache, PolicyKind};
use tier_kube::writer::KubeWriter;
use tier_server::readiness::{ACNP_CACHE_SYNCED, ANNP_CACHE_SYNCED, from_fn};
use tier_server::readiness::{Check, CheckState};
use tier_server::webhook::{PolicyReferences, ReservationTable, ReservingWriter, Webhook};
use tokio::sync::watch;

use crate::backend::{Backend, Serving, Start};
use crate::{CONTROLLER_IDENTITY, SERVING_CERTIFICATE, SelfSigned, StartError, admission};

/// What only Antrea's assembly can be told ([`Builder`](crate::Builder)'s Antrea setters).
#[derive(Debug, Default)]
pub struct AntreaSettings {
    /// The user the webhook lets change priorities; asked of the API server when `None`.
    pub(crate) controller_user: Option<String>,
    /// The admission rules (feature gates) the webhook applies.
    pub(crate) rules: ValidationRules,
    /// The self-signed serving certificate to keep, if any.
    pub(crate) self_signed: Option<SelfSigned>,
    /// Where CREATE reviews and the writer claim priorities across replicas, if they do.
    pub(crate) claims: Option<ClaimsConfig>,
}

/// Antrea's running parts: the webhook and what it reads.
pub struct AntreaParts {
    acnps: PolicyCache<ClusterNetworkPolicies>,
    annps: PolicyCache<NetworkPolicies>,
    identity: ControllerIdentity,
    reservations: ReservationTable,
    claims: Option<Arc<dyn PriorityClaims>>,
    rules: ValidationRules,
    self_signed: Option<SelfSigned>,
    webhook: Option<admission::IdentityGated>,
    certificate: Option<watch::Receiver<CheckState>>,
}

impl fmt::Debug for AntreaParts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AntreaParts")
            .field("identity", &self.identity.state())
            .finish_non_exhaustive()
    }
}

impl AntreaParts {
    /// The controller identity (known, or still being asked).
    pub(crate) fn identity(&self) -> &ControllerIdentity {
        &self.identity
    }
}

impl Backend for Antrea {
    type Object = Tier;
    type Settings = AntreaSettings;
    type Parts = AntreaParts;
    type Writer = ReservingWriter<KubeWriter<Tier>>;

    fn settings() -> AntreaSettings {
        AntreaSettings::default()
    }

    fn watch_tiers(
        client: &kube::Client,
        _settings: &AntreaSettings,
    ) -> Result<KubeLister<Tier>, tier_kube::lister::ListerError> {
        crate::watch_tiers(client)
    }

    fn start(start: Start<'_, Self>) -> Result<AntreaParts, StartError> {
        let Start {
            client,
            settings,
            call_timeout,
            ..
        } = start;
        let acnps = policy_cache::<ClusterNetworkPolicies>(client)?;
        let annps = policy_cache::<NetworkPolicies>(client)?;
        let identity = match settings.controller_user {
            Some(user) => {
                tracing::info!(%user, "the webhook lets this user change priorities (set explicitly)");
                ControllerIdentity::known(user)
            }
            None => ControllerIdentity::discover(client.clone(), call_timeout)?,
        };
        let claims = match settings.claims {
            Some(config) => {
                tracing::info!(
                    namespace = %config.namespace,
                    lease = %config.lease,
                    "Tier creates claim their priority in a Lease shared by every replica"
                );
                let claims: Arc<dyn PriorityClaims> =
                    Arc::new(LeaseClaims::new(client.clone(), config)?);
                Some(claims)
            }
            None => None,
        };
        Ok(AntreaParts {
            acnps,
            annps,
            identity,
            reservations: ReservationTable::default(),
            claims,
            rules: settings.rules,
            self_signed: settings.self_signed,
            webhook: None,
            certificate: None,
        })
    }

    fn writer(parts: &AntreaParts, writer: KubeWriter<Tier>) -> Self::Writer {
        let writer = ReservingWriter::new(writer, parts.reservations.clone());
        match &parts.claims {
            Some(claims) => writer.claiming(claims.clone()),
            None => writer,
        }
    }

    fn serve(parts: &mut AntreaParts, serving: Serving<'_, Self>) {
        let Serving {
            client,
            desired,
            lister,
            readiness,
            shutdown,
            call_timeout,
            tasks,
        } = serving;
        readiness
            .register_informational(ACNP_CACHE_SYNCED, policy_cache_synced(parts.acnps.clone()))
            .register_informational(ANNP_CACHE_SYNCED, policy_cache_synced(parts.annps.clone()))
            .register_informational(CONTROLLER_IDENTITY, identity_known(parts.identity.clone()));
        parts.certificate = parts.self_signed.take().map(|wanted| {
            let (state, check) = watch::channel(CheckState::failed(
                "settling the self-signed certificate: no answer from the API server yet",
            ));
            readiness.register(SERVING_CERTIFICATE, check.clone());
            tasks.push(tokio::spawn(crate::certificate::settle_then_maintain(
                client.clone(),
                wanted,
                call_timeout,
                state,
                shutdown.clone(),
            )));
            check
        });

        let cache: Arc<dyn TierLister> = Arc::new(lister.clone());
        let references =
            PolicyReferences::new(Arc::new(parts.acnps.clone()), Arc::new(parts.annps.clone()));
        let policy_of = {
            let desired = desired.clone();
            let rules = parts.rules.clone();
            move |user: &str| admission_policy(&desired, user, rules.clone())
        };
        let gates = readiness.clone();
        let reservations = parts.reservations.clone();
        let claims = parts.claims.clone();
        let make: admission::MakeWebhook = Arc::new(move |user: &str| {
            let webhook = Webhook::new(cache.clone(), policy_of(user), &gates)
                .policy_references(references.clone())
                .reservations(reservations.clone());
            match &claims {
                Some(claims) => webhook.claims(claims.clone()),
                None => webhook,
            }
        });
        parts.webhook = Some(admission::IdentityGated::new(parts.identity.clone(), make));
    }

    fn webhook(parts: &AntreaParts) -> Option<Router> {
        parts.webhook.clone().map(admission::IdentityGated::routes)
    }

    fn certificate(parts: &AntreaParts) -> Option<watch::Receiver<CheckState>> {
        parts.certificate.clone()
    }
}

/// A policy cache watching with the start-up backoff.
fn policy_cache<K: PolicyKind>(client: &kube::Client) -> Result<PolicyCache<K>, StartError> {
    Ok(PolicyCache::<K>::start_with(
        client.clone(),
        watcher::Config::default(),
        RetryBackoff::default(),
    )?)
}

/// The admission policy for `desired` under `rules`: Antrea's six names and every desired name
/// are protected from deletion (a custom set adds to Antrea's, never replaces them), each
/// desired priority belongs to its Tier, and `user` may change priorities.
pub(crate) fn admission_policy(
    desired: &DesiredSet,
    user: &str,
    rules: ValidationRules,
) -> AdmissionPolicy {
    AdmissionPolicy::antrea(user)
        .desire(desired)
        .with_rules(rules)
}

/// The readiness check of one policy cache: passes once it listed (or found its CRD not
/// installed); until then its reason names the watch's last error.
fn policy_cache_synced<K: PolicyKind>(cache: PolicyCache<K>) -> impl Check {
    from_fn(move || match cache.describe() {
        Ok(_) => CheckState::Ok,
        Err(reason) => CheckState::Failed(reason),
    })
}

/// [`CONTROLLER_IDENTITY`]: ok once known; else what the SelfSubjectReview last met.
fn identity_known(identity: ControllerIdentity) -> impl Check {
    from_fn(move || match identity.state() {
        IdentityState::Known(_) => CheckState::Ok,
        IdentityState::Pending {
            attempts,
            last_error,
        } => CheckState::Failed(match last_error {
            Some(error) => format!(
                "asking the API server who tierd is (SelfSubjectReview), {attempts} attempts \
                 failed; UPDATE reviews wait for it: {error}"
            ),
            None => "asking the API server who tierd is (SelfSubjectReview); UPDATE reviews \
                     wait for it"
                .to_owned(),
        }),
    })
}

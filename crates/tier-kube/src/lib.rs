//! The Kubernetes adapter of tierd: Antrea's and Calico's `Tier` resources and the core's ports
//! on kube-rs 5.
//!
//! - [`kube_tier`]: [`KubeTier`](kube_tier::KubeTier), what the shared lister and writer need of
//!   one controller's Tier object; one implementation per controller, the machinery written once.
//! - [`crd`]: Antrea's [`Tier`](crd::Tier) custom resource, its CRD ([`crd::crd_yaml`]) and the
//!   mapping to the core's [`ObservedTier`](tier_core::ObservedTier).
//! - [`calico`]: Calico's [`CalicoTier`](calico::CalicoTier) at a configured group/version
//!   ([`CalicoApi`](calico::CalicoApi), `projectcalico.org/v3` by default) and the mapping to
//!   [`tier_core::calico::ObservedTier`].
//! - [`lister`]: [`KubeLister<T>`](lister::KubeLister), the [`TierLister`](tier_core::TierLister)
//!   port on a kube-runtime watcher and reflector; it also exposes the reflector's store and watch
//!   health.
//! - [`writer`]: [`KubeWriter<T>`](writer::KubeWriter), the [`TierWriter`](tier_core::TierWriter)
//!   port (POST to create, PUT with a resourceVersion precondition to update), each call bounded by
//!   a timeout.
//! - [`certs`]: `--self-signed-cert`: a CA and serving certificate kept in a Secret
//!   (filling the Secret the install ships empty, checked before use, renewed before expiry)
//!   and in the webhook configuration's `caBundle`.
//! - [`policies`]: [`PolicyCache`](policies::PolicyCache), Antrea ClusterNetworkPolicies and
//!   NetworkPolicies indexed by raw `spec.tier`, for the webhook's DELETE rule (a missing CRD
//!   counts as synced and empty).
//! - [`classify`]: `kube::Error` and HTTP answers to the core's
//!   [`WriteError`](tier_core::WriteError) classes, with `Retry-After`.
//! - [`explain`]: watch and client failures in words (HTTP code, reason, message, network
//!   cause, what to do), as the lister keeps its last error.
//! - [`events`]: Kubernetes Events for created, corrected, blocked and contested Tiers.
//! - [`client`]: building a [`kube::Client`] from a kubeconfig, a context or the in-cluster
//!   service account: the shared one with kube's defaults, the writer's with retries off.
//! - [`identity`]: who the client authenticates as (`SelfSubjectReview`), the default user the
//!   webhook lets change priorities, learned in the background
//!   ([`ControllerIdentity`](identity::ControllerIdentity)).
//! - [`auth`]: a bearer token and a non-resource request reviewed by the API server
//!   (TokenReview, SubjectAccessReview), for `/metrics`.
//! - [`backoff`]: [`RetryBackoff`](backoff::RetryBackoff), the capped, jittered retry pace of the
//!   watches and start-up requests; [`RetryWatch`](backoff::RetryWatch), a watcher retried at
//!   that pace (reset only once the server answered); [`OutageLog`](backoff::OutageLog), an
//!   outage said once, with a reminder at most every minute and its end.
//! - [`lease`]: leader election on a `coordination.k8s.io/v1` Lease by client-go's rules, with
//!   fencing ([`Elector`](lease::Elector)): the write permission the driver's gate takes.
//! - [`claims`]: [`LeaseClaims`](claims::LeaseClaims), the
//!   [`PriorityClaims`](tier_core::PriorityClaims) port on one Lease, so that several replicas of
//!   the webhook admit one Tier per priority.
//!
//! One watch, one store: the writer is made from the lister (it updates from the lister's store),
//! and a lister can sit on an embedder's own reflector
//! ([`KubeLister::shared`](lister::KubeLister::shared)). A complete controller embedding tierd this
//! way, run in CI against the test API server, is `examples/embed-controller` (see README,
//! "Embedding tierd").
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use tier_core::{DesiredSet, DriverConfig, Mode};
//! use tier_kube::client::ClientOptions;
//! use tier_kube::lister::KubeLister;
//! use tier_kube::writer::WriterConfig;
//!
//! let config = tier_kube::client::config(&ClientOptions::default()).await?;
//! let client = tier_kube::client::client_from_config(config.clone())?; // shared, retries on
//! let lister = KubeLister::start(client)?;
//! let writer = lister.writer(tier_kube::client::writer_client(config)?, WriterConfig::default());
//! let ensurer = tier_runtime::spawn(lister, writer, DesiredSet::antrea(), DriverConfig::default(), Mode::Continuous)?;
//! ensurer.status().initialized().await.ok();
//! # Ok(())
//! # }
//! ```
//!
//! Calico's Tiers through the same machinery (the resource is the lister's configuration):
//!
//! ```no_run
//! # async fn example(client: kube::Client, writer_client: kube::Client) -> Result<(), tier_kube::lister::ListerError> {
//! use tier_core::calico::Calico;
//! use tier_core::{DesiredSet, TierLister};
//! use tier_kube::calico::{CalicoApi, CalicoTier};
//! use tier_kube::lister::KubeLister;
//! use tier_kube::writer::WriterConfig;
//!
//! let lister: KubeLister<CalicoTier> =
//!     KubeLister::watch(client, CalicoApi::V3.resource(), Default::default())?;
//! let writer = lister.writer(writer_client, WriterConfig::default());
//! let desired = DesiredSet::<Calico>::calico(); // the three built-in Tiers
//! lister.wait_synced().await;
//! # let _ = (writer, desired);
//! # Ok(())
//! # }
//! ```

pub mod auth;
pub mod backoff;
pub mod calico;
pub mod certs;
pub mod claims;
pub mod classify;
pub mod client;
pub mod crd;
pub mod events;
pub mod explain;
pub mod identity;
pub mod kube_tier;
pub mod lease;
pub mod lister;
pub mod policies;
pub mod writer;

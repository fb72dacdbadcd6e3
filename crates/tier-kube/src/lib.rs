//! The Kubernetes adapter of tierd: Antrea's `Tier` CRD and the core's ports on kube-rs 5.
//!
//! - [`crd`]: the [`Tier`] custom resource, its CRD ([`crd::crd_yaml`]) and the mapping to the
//!   core's [`ObservedTier`](tier_core::ObservedTier).
//! - [`lister`]: [`KubeLister`], the [`TierLister`](tier_core::TierLister) port on a
//!   kube-runtime watcher and reflector; it also exposes the reflector's store and watch health.
//! - [`writer`]: [`KubeWriter`], the [`TierWriter`](tier_core::TierWriter) port (POST to create,
//!   PUT with a resourceVersion precondition to update), each call bounded by a timeout.
//! - [`certs`]: `--self-signed-cert`: a CA and serving certificate kept in a Secret
//!   (create-if-absent, renewed before expiry) and in the webhook configuration's `caBundle`.
//! - [`policies`]: [`PolicyCache`], Antrea ClusterNetworkPolicies and NetworkPolicies indexed
//!   by raw `spec.tier`, for the webhook's DELETE rule (a missing CRD counts as synced and empty).
//! - [`classify`]: `kube::Error` and HTTP answers to the core's
//!   [`WriteError`](tier_core::WriteError) classes, with `Retry-After`.
//! - [`explain`]: watch and client failures in words (HTTP code, reason, message, network
//!   cause, what to do), as the lister keeps its last error.
//! - [`events`]: Kubernetes Events for created, corrected, blocked and contested Tiers.
//! - [`client`]: building a [`kube::Client`] from a kubeconfig, a context or the in-cluster
//!   service account, with kube's own retry layer off.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use tier_core::{DesiredSet, DriverConfig, Mode};
//! use tier_kube::{ClientOptions, KubeLister, KubeWriter, WriterConfig};
//!
//! let client = tier_kube::client::client(&ClientOptions::default()).await?;
//! let lister = KubeLister::start(client.clone())?;
//! let writer = KubeWriter::new(client, WriterConfig::default()).with_store(lister.store());
//! let ensurer = tier_runtime::spawn(lister, writer, DesiredSet::antrea(), DriverConfig::default(), Mode::Continuous);
//! ensurer.status().initialized().await.ok();
//! # Ok(())
//! # }
//! ```

pub mod certs;
pub mod classify;
pub mod client;
pub mod crd;
pub mod events;
pub mod explain;
pub mod lister;
pub mod policies;
pub mod writer;

pub use client::{ClientError, ClientOptions};
pub use crd::{CrdError, Tier};
pub use lister::{KubeLister, ListerError, WatchStats};
pub use policies::{ClusterNetworkPolicies, NetworkPolicies, PolicyCache};
pub use writer::{KubeWriter, WriterConfig};

//! [`Backend`]: what one controller adds to the one assembly, and nothing else.
//!
//! [`Builder::start`](crate::Builder::start) is written once: the Tier cache, the writer, the
//! driver, Events, `/metrics` and its authentication, the standard readiness checks and the
//! shutdown are the same for every controller. A controller implements [`Backend`] (in this
//! crate, one module each) for the rest:
//!
//! | | Antrea ([`crate::antrea`]) | Calico ([`crate::calico`]) |
//! |---|---|---|
//! | Tier object | `tiers.crd.antrea.io/v1beta1` | `tiers.projectcalico.org/v3` (or the configured API) |
//! | settings | controller user, feature-gate rules, self-signed certificate | the Tier API |
//! | writer | records every create in the webhook's reservation table | the shared writer as is |
//! | own parts | policy caches, controller identity, the Tier webhook, the certificate | none: Calico protects its built-in Tiers itself |
//!
//! A third controller writes a module here with its settings and its parts (or none), beside
//! its `tier_core` module and its `tier_kube::kube_tier::KubeTier` object.

use std::fmt;
use std::time::Duration;

use axum::Router;
use tier_core::{Controller, DesiredSet, TierWriter};
use tier_kube::kube_tier::KubeTier;
use tier_kube::lister::KubeLister;
use tier_kube::writer::KubeWriter;
use tier_server::readiness::{CheckState, Readiness, Shutdown};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::StartError;

/// One controller's part of the assembly; implemented in this crate for [`tier_core::Antrea`]
/// and [`tier_core::calico::Calico`] (see the [module docs](self)).
pub trait Backend: Controller {
    /// The Tier object in Kubernetes, read by the Tier cache and written by the writer.
    type Object: KubeTier<Controller = Self>;
    /// What the builder can set for this controller only.
    type Settings: fmt::Debug + Send + 'static;
    /// What runs for this controller only, besides the shared parts.
    type Parts: Send + Sync + 'static;
    /// The writer the driver gets: the shared writer, wrapped where this controller must.
    type Writer: TierWriter<Self> + 'static;

    /// The settings when the builder is told nothing.
    fn settings() -> Self::Settings;

    /// tierd's own watch of every Tier, retrying with the start-up backoff. `client` should
    /// have kube's retry layer off (the assembly passes its retry-free client), so that the
    /// watch's backoff is the only retry loop.
    ///
    /// # Errors
    ///
    /// [`tier_kube::lister::ListerError`] outside a tokio runtime.
    fn watch_tiers(
        client: &kube::Client,
        settings: &Self::Settings,
    ) -> Result<KubeLister<Self::Object>, tier_kube::lister::ListerError>;

    /// Starts this controller's parts that the writer needs (before the driver starts); sends
    /// no request itself.
    ///
    /// # Errors
    ///
    /// [`StartError`] only outside a tokio runtime.
    fn start(start: Start<'_, Self>) -> Result<Self::Parts, StartError>;

    /// The driver's writer on `writer`, the shared one.
    fn writer(parts: &Self::Parts, writer: KubeWriter<Self::Object>) -> Self::Writer;

    /// Registers this controller's readiness checks and starts its background tasks, once the
    /// driver runs.
    fn serve(parts: &mut Self::Parts, serving: Serving<'_, Self>);

    /// The routes of this controller's own port (Antrea: `POST /validate/tier`), if it has one.
    fn webhook(parts: &Self::Parts) -> Option<Router>;

    /// The serving certificate's readiness, when this controller keeps one.
    fn certificate(parts: &Self::Parts) -> Option<watch::Receiver<CheckState>>;
}

/// What [`Backend::start`] gets.
pub struct Start<'a, C: Backend> {
    /// The retry-free client, for the parts' own retry loops (the policy caches, the identity).
    pub(crate) client: &'a kube::Client,
    pub(crate) settings: C::Settings,
    pub(crate) call_timeout: Duration,
}

/// What [`Backend::serve`] gets.
pub struct Serving<'a, C: Backend> {
    /// The retry-free client, for the background tasks' own retry loops (the certificate).
    pub(crate) client: &'a kube::Client,
    pub(crate) desired: &'a DesiredSet<C>,
    pub(crate) lister: &'a KubeLister<C::Object>,
    pub(crate) readiness: &'a Readiness,
    pub(crate) shutdown: &'a Shutdown,
    pub(crate) call_timeout: Duration,
    pub(crate) tasks: &'a mut Vec<JoinHandle<()>>,
}

impl<C: Backend> fmt::Debug for Start<'_, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Start")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl<C: Backend> fmt::Debug for Serving<'_, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Serving")
            .field("desired", self.desired)
            .finish_non_exhaustive()
    }
}

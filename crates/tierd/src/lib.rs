//! tierd assembled: one builder for the `tierd run` daemon and every controller that embeds it,
//! for Antrea's Tiers (the default) or Calico's.
//!
//! The assembly is written once, generic over the controller ([`Builder<C>`], [`Tierd<C>`],
//! `C: `[`Backend`]): the Tier cache, the writer, the driver, Events, `/metrics` and readiness
//! are the same for every controller; what only one has is its [`Backend`] implementation
//! ([`antrea`]: the Tier webhook with the writer's reservations, the policy caches, the
//! controller identity and the self-signed certificate; [`calico`]: the Tier API, and no
//! webhook, since Calico protects its built-in Tiers itself). The tables below describe
//! Antrea's assembly; Calico's has the rows without a webhook:
//! `Tierd::builder(clients, DesiredSet::<Calico>::calico()).calico_api(api).start()`.
//!
//! [`Tierd::builder`] takes the two clients ([`Clients`]: the shared one with kube's retries,
//! the writer's without) and the desired Tiers; [`Builder::start`] starts, and returns a
//! running [`Tierd`] that owns every part:
//!
//! | part | default | a caller may |
//! |---|---|---|
//! | the Tier cache | its own watch of every Tier | give its own reflector's lister ([`Builder::tier_cache`]) |
//! | the writer | from the Tier cache, no-retry client, recording into the webhook's reservation table | set its call timeout and field manager ([`Builder::writer_config`]) |
//! | the policy caches (ClusterNetworkPolicies, NetworkPolicies) | their own watches | nothing: the webhook's DELETE needs them |
//! | the controller identity | learned by SelfSubjectReview in the background | set it ([`Builder::controller_user`]) |
//! | protected names | Antrea's six and every desired name | nothing |
//! | Events | published as Kubernetes Events | set the reporting instance, or turn them off ([`Builder::events`]) |
//! | metrics authentication | off (bind `/metrics` to localhost) | turn it on ([`Builder::metrics_auth`]) |
//! | the self-signed certificate | none | keep one ([`Builder::self_signed_cert`]) |
//! | priority claims across replicas | none: each replica's own reservation table | claim in a Lease ([`Builder::priority_claims`]) |
//! | readiness checks | all of tierd's; `system-tiers` informational | require `system-tiers` ([`Builder::ready_requires_tiers`]), register its own on [`Tierd::readiness`] |
//! | who writes Tiers | this process, always | elect one writer by tierd's Lease, or pass its own leadership signal ([`Builder::leadership`], [`Leadership`]) |
//!
//! The running [`Tierd`] gives the driver's status ([`Tierd::status`], with
//! `initialized()`), the routers for each port ([`Tierd::probes`], [`Tierd::webhook`],
//! [`Tierd::metrics`], or [`Tierd::router`] for all on one), and a prompt
//! [`shutdown`](Tierd::shutdown). There is no way to get a webhook without the policy caches
//! (which would refuse every DELETE) or without the writer's reservations (which would let two
//! creates at one priority pass): the builder makes all three from one table.
//!
//! # Nothing from the network is fatal
//!
//! [`Builder::start`] sends no request and fails only outside a tokio runtime. Every fact learned
//! from the API server is a dependency with a readiness check and a capped, jittered retry
//! ([`tier_kube::backoff::RetryBackoff::STARTUP`]: at most 2 s between attempts), needed only by
//! the handlers that read it:
//!
//! | fact | check | needed by |
//! |---|---|---|
//! | the Tier cache | `tier-cache-synced` (required) | the driver; every review |
//! | the policy caches | `acnp-cache-synced`, `annp-cache-synced` (informational) | DELETE reviews |
//! | the controller identity | [`CONTROLLER_IDENTITY`] (informational) | UPDATE reviews that change a priority (until then: [`IDENTITY_PENDING`](tier_server::webhook::IDENTITY_PENDING), code 503, retry after 1 s) |
//! | the self-signed certificate | [`SERVING_CERTIFICATE`] (required) | the webhook's port ([`Tierd::certificate_settled`]) |
//! | the Lease, with leader election | [`LEADER_ELECTION`] (informational) | the driver's writes (a standby observes and serves, and writes nothing) |
//!
//! The informational checks do not fail `/readyz`: kube-apiserver reaches the webhook only
//! through Ready pods, and tierd's own Tier creates need the webhook (the second dependency
//! loop in docs/ARCHITECTURE.md).
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use tier_core::DesiredSet;
//! use tierd::{Clients, Tierd};
//!
//! let config = tier_kube::client::config(&tier_kube::client::ClientOptions::default()).await?;
//! let tierd = Tierd::builder(Clients::from_config(config)?, DesiredSet::antrea()).start()?;
//! let router = tierd.router(prometheus_client::registry::Registry::default());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! let serving = tokio::spawn(async move { axum::serve(listener, router).await });
//! tierd.initialized().await.ok();
//! tierd.shutdown().await;
//! serving.abort();
//! # Ok(())
//! # }
//! ```
//!
//! [`tiers_file`] reads the `--tiers` file format, for the binary and for embedders that read
//! the same file.

#![forbid(unsafe_code)]

mod admission;
pub mod antrea;
mod authorizer;
pub mod backend;
pub mod calico;
mod certificate;
pub mod tiers_file;

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use axum::Router;
use kube::runtime::watcher;
use prometheus_client::registry::Registry;
use tier_core::calico::Calico;
use tier_core::{
    Antrea, DesiredSet, Driver, DriverConfig, DriverStopped, Mode, StatusHandle, Stopped,
    TierLister, ValidationRules,
};
use tier_kube::backoff::RetryBackoff;
use tier_kube::calico::CalicoApi;
use tier_kube::identity::ControllerIdentity;
use tier_kube::kube_tier::KubeTier;
use tier_kube::lease::{ElectionConfig, ElectionError, Elector, KubeLeases};
use tier_kube::lister::KubeLister;
use tier_kube::writer::WriterConfig;
use tier_runtime::Ensurer;
use tier_server::health::HealthConfig;
use tier_server::readiness::{CacheSynced, LEADER_ELECTION, SYSTEM_TIERS, SystemTiers};
use tier_server::readiness::{CheckState, Readiness, Shutdown};
use tier_server::server::Routes;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use backend::Backend;
pub use certificate::{SERVING_CERTIFICATE, SelfSigned};

/// The readiness check that passes once the controller identity is known (informational:
/// only UPDATE reviews need it; Antrea only).
pub const CONTROLLER_IDENTITY: &str = "controller-identity";

/// The two clients tierd needs, from one `kube::Config`: the shared one (kube's retries on:
/// Events, the metrics reviews, the embedder's own calls) and the retry-free one (the writer:
/// every failure reaches the core, which re-observes first; and tierd's own retry loops, the
/// watches, the identity and the certificate, which pace themselves with
/// [`RetryBackoff`]: under them kube's retry layer, up to 15 retries of a 503, would hide an
/// outage from the watch for minutes and delay its recovery). Only
/// [`from_config`](Self::from_config) makes them, so the writer's client cannot have retries
/// on.
#[derive(Clone)]
pub struct Clients {
    shared: kube::Client,
    writer: kube::Client,
}

impl fmt::Debug for Clients {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Clients").finish_non_exhaustive()
    }
}

impl Clients {
    /// Both clients for `config`. Sends no request.
    ///
    /// # Errors
    ///
    /// [`tier_kube::client::ClientError`] when `config` cannot make a client (TLS, credentials).
    pub fn from_config(config: kube::Config) -> Result<Self, tier_kube::client::ClientError> {
        Ok(Self {
            shared: tier_kube::client::client_from_config(config.clone())?,
            writer: tier_kube::client::writer_client(config)?,
        })
    }

    /// The shared client, for the embedder's own requests and watches.
    pub fn shared(&self) -> &kube::Client {
        &self.shared
    }
}

/// Starting tierd failed; never because of the API server.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A cache could not be started (outside a tokio runtime: a bug in the caller).
    #[error(transparent)]
    Cache(#[from] tier_kube::lister::ListerError),
    /// The identity could not be looked for (outside a tokio runtime: a bug in the caller).
    #[error(transparent)]
    Identity(#[from] tier_kube::identity::IdentityError),
    /// The driver configuration ([`Builder::driver_config`]) is out of range; nothing started.
    #[error(transparent)]
    Config(#[from] tier_core::ConfigError),
    /// The leader election configuration ([`Leadership::Lease`]) cannot fence or is out of
    /// range; nothing started.
    #[error("leader election: {0}")]
    Election(#[from] ElectionError),
    /// The priority claims' configuration ([`Builder::priority_claims`]) is out of range.
    #[error(transparent)]
    Claims(#[from] tier_kube::claims::ClaimsConfigError),
}

/// Who decides that this replica may write Tiers ([`Builder::leadership`]). Whatever the
/// choice, every replica keeps its caches and serves the webhook, the probes and the metrics,
/// and stays Ready; only the writes wait.
#[derive(Debug, Default)]
pub enum Leadership {
    /// Nobody: this process writes (the default; one replica).
    #[default]
    Always,
    /// tierd's own Lease (`tierd run --leader-elect`): only its holder writes, with fencing
    /// and release on [`Tierd::shutdown`] (see [`tier_kube::lease`]). Leadership shows in
    /// [`LEADER_ELECTION`], `tierd_leader` and an Event about the Lease on each change.
    Lease(ElectionConfig),
    /// The embedder's own signal (its controller already elects a leader): writes start only
    /// while it is `true`; a closed channel counts as `false`. Shows in [`LEADER_ELECTION`]
    /// and `tierd_leader`; the embedder's elector tells its own Events.
    Signal(watch::Receiver<bool>),
}

/// Whether and how the driver's Tier events become Kubernetes Events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Events {
    /// Published as Kubernetes Events, reported by `tierd` (and `instance`, e.g. the pod name).
    Kubernetes {
        /// The reporting instance.
        instance: Option<String>,
    },
    /// Not published.
    Off,
}

/// How to start tierd for controller `C` (Antrea by default); see the [crate docs](crate).
/// Made by [`Tierd::builder`].
#[must_use = "call start to run tierd"]
pub struct Builder<C: Backend = Antrea> {
    clients: Clients,
    desired: DesiredSet<C>,
    tier_cache: Option<KubeLister<C::Object>>,
    settings: C::Settings,
    writer: WriterConfig,
    driver: DriverConfig<C>,
    events: Events,
    metrics_auth: bool,
    ready_requires_tiers: bool,
    health: HealthConfig,
    leadership: Leadership,
}

impl<C: Backend> fmt::Debug for Builder<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("controller", &C::NAME)
            .field("desired", &self.desired)
            .field("settings", &self.settings)
            .field("events", &self.events)
            .field("metrics_auth", &self.metrics_auth)
            .finish_non_exhaustive()
    }
}

impl Builder<Antrea> {
    /// The user the webhook lets change priorities, instead of asking the API server
    /// (SelfSubjectReview) who the shared client is.
    pub fn controller_user(mut self, user: impl Into<String>) -> Self {
        self.settings.controller_user = Some(user.into());
        self
    }

    /// The admission rules (feature gates) the webhook applies; Antrea's defaults otherwise.
    /// Validate the desired set against the same rules.
    pub fn rules(mut self, rules: ValidationRules) -> Self {
        self.settings.rules = rules;
        self
    }

    /// Keep a self-signed serving certificate in a Secret, the files and the webhook
    /// configuration's `caBundle`; the webhook serves once [`Tierd::certificate_settled`].
    pub fn self_signed_cert(mut self, self_signed: SelfSigned) -> Self {
        self.settings.self_signed = Some(self_signed);
        self
    }

    /// Claim the priority of every admitted CREATE review, and of every write of tierd's own,
    /// in the Lease `config` names ([`tier_kube::claims`]), so that several replicas of the
    /// webhook admit one Tier per priority. Off by default (one replica needs no claims); a
    /// claim that cannot be made refuses the create retryably.
    pub fn priority_claims(mut self, config: tier_kube::claims::ClaimsConfig) -> Self {
        self.settings.claims = Some(config);
        self
    }
}

impl Builder<Calico> {
    /// The group/version Calico's Tiers are read and written at (default
    /// `projectcalico.org/v3`, see [`tier_kube::calico`]). Ignored with
    /// [`tier_cache`](Self::tier_cache): the writer uses the embedder's lister's resource.
    pub fn calico_api(mut self, api: CalicoApi) -> Self {
        self.settings.api = api;
        self
    }
}

impl<C: Backend> Builder<C> {
    /// Read the Tiers from the embedder's lister instead of a watch of tierd's own (one list
    /// and one watch for both; [`KubeLister::shared`] or [`KubeLister::from_reflector`]). The
    /// writer updates from its store, so the embedder's labels survive tierd's corrections.
    pub fn tier_cache(mut self, lister: KubeLister<C::Object>) -> Self {
        self.tier_cache = Some(lister);
        self
    }

    /// The writer's field manager and call timeout (the timeout also bounds each identity and
    /// certificate request).
    pub fn writer_config(mut self, config: WriterConfig) -> Self {
        self.writer = config;
        self
    }

    /// The driver's timing and seed.
    pub fn driver_config(mut self, config: DriverConfig<C>) -> Self {
        self.driver = config;
        self
    }

    /// Kubernetes Events for created, corrected, blocked and contested Tiers (default: on,
    /// no instance).
    pub fn events(mut self, events: Events) -> Self {
        self.events = events;
        self
    }

    /// Protect `/metrics` by TokenReview and SubjectAccessReview (serve it over TLS then).
    pub fn metrics_auth(mut self, on: bool) -> Self {
        self.metrics_auth = on;
        self
    }

    /// Make `system-tiers` a required readiness check (see the crate docs for the loop that
    /// risks).
    pub fn ready_requires_tiers(mut self, on: bool) -> Self {
        self.ready_requires_tiers = on;
        self
    }

    /// Which checks `/livez` and `/readyz` include.
    pub fn health(mut self, config: HealthConfig) -> Self {
        self.health = config;
        self
    }

    /// Who may write Tiers (default [`Leadership::Always`]): tierd's Lease, or the embedder's
    /// own leadership signal.
    pub fn leadership(mut self, leadership: Leadership) -> Self {
        self.leadership = leadership;
        self
    }

    /// Starts every part in the background and returns at once; sends no request itself.
    ///
    /// # Errors
    ///
    /// [`StartError`] only outside a tokio runtime.
    pub fn start(self) -> Result<Tierd<C>, StartError> {
        // Invalid configuration starts nothing.
        self.driver.validate()?;
        if let Leadership::Lease(config) = &self.leadership {
            config.validate()?;
        }
        let client = self.clients.shared.clone();
        // tierd's own retry loops pace themselves: no kube retry layer under them.
        let retry_free = self.clients.writer.clone();
        let lister = match self.tier_cache {
            Some(lister) => lister,
            None => C::watch_tiers(&retry_free, &self.settings)?,
        };
        let mut parts = C::start(backend::Start {
            client: &retry_free,
            settings: self.settings,
            call_timeout: self.writer.call_timeout,
        })?;
        let writer = C::writer(
            &parts,
            lister.writer(self.clients.writer.clone(), self.writer.clone()),
        );
        let mut tasks = Tasks::default();
        let desired = self.desired.clone();
        let mut driver = Driver::new(
            lister.clone(),
            writer,
            tier_runtime::TokioClock,
            desired,
            self.driver,
        )?;
        let (elector, gate) = match self.leadership {
            Leadership::Always => (None, None),
            Leadership::Signal(signal) => (None, Some(signal)),
            Leadership::Lease(config) => {
                let leases = KubeLeases::new(self.clients.writer.clone(), &config);
                let mut elector = Elector::spawn(leases, config.clone())?;
                if let (Events::Kubernetes { instance }, Some(events)) =
                    (&self.events, elector.events())
                {
                    let reporter = tier_kube::events::reporter(instance.clone());
                    let client = client.clone();
                    tasks.leader_events = Some(tokio::spawn(async move {
                        tier_kube::lease::publish_events(client, reporter, &config, events).await;
                    }));
                }
                let gate = elector.may_write();
                (Some(elector), Some(gate))
            }
        };
        if let Some(gate) = &gate {
            driver.leadership(gate.clone());
        }
        if let Events::Kubernetes { instance } = &self.events {
            let events = driver.events();
            let reporter = tier_kube::events::reporter(instance.clone());
            let events = tier_kube::events::publish_about(
                client.clone(),
                reporter,
                events,
                tier_kube::events::EventSubject::of::<C::Object>(lister.resource()),
            );
            tasks.handles.push(tokio::spawn(async move {
                events.await;
            }));
        }
        let ensurer = tier_runtime::spawn_driver(driver, Mode::Continuous);
        let status = ensurer.status();
        tasks.driver = Some(ensurer.cancellation());

        let shutdown = Shutdown::new();
        let readiness = Readiness::standard(status.clone(), cache_synced::<C>(&lister), &shutdown);
        if self.ready_requires_tiers {
            readiness.register(SYSTEM_TIERS, SystemTiers(status.clone()));
        }
        match (&elector, gate) {
            (Some(elector), _) => {
                let leader = elector.status();
                readiness.register_informational(
                    LEADER_ELECTION,
                    tier_server::readiness::from_fn(move || {
                        let leader = leader.borrow();
                        if leader.leading {
                            CheckState::Ok
                        } else {
                            CheckState::failed(leader.to_string())
                        }
                    }),
                );
            }
            (None, Some(signal)) => {
                readiness.register_informational(
                    LEADER_ELECTION,
                    tier_server::readiness::from_fn(move || {
                        if signal.has_changed().is_ok() && *signal.borrow() {
                            CheckState::Ok
                        } else {
                            CheckState::failed(
                                "standby: the embedder's leader election says another replica \
                                 leads; this replica writes no Tier",
                            )
                        }
                    }),
                );
            }
            (None, None) => {}
        }
        C::serve(
            &mut parts,
            backend::Serving {
                client: &retry_free,
                desired: &self.desired,
                lister: &lister,
                readiness: &readiness,
                shutdown: &shutdown,
                call_timeout: self.writer.call_timeout,
                tasks: &mut tasks.handles,
            },
        );
        let authorizer = self.metrics_auth.then(|| {
            let authorizer: Arc<dyn tier_server::auth::Authorizer> =
                Arc::new(authorizer::KubeAuthorizer::new(client.clone()));
            authorizer
        });
        Ok(Tierd {
            ensurer,
            elector,
            status,
            lister,
            readiness,
            shutdown,
            parts,
            authorizer,
            health: self.health,
            tasks,
        })
    }
}

/// Antrea's Tier cache on its own watch of every Tier, retrying with
/// [`RetryBackoff::STARTUP`] (at most 2 s between attempts, so it syncs soon after an
/// unreachable API server returns), for commands that need the cache alone (`tierd plan`,
/// `tierd ensure`); [`Backend::watch_tiers`] for any controller's.
///
/// # Errors
///
/// [`tier_kube::lister::ListerError`] outside a tokio runtime.
pub fn watch_tiers(client: &kube::Client) -> Result<KubeLister, tier_kube::lister::ListerError> {
    watch_resource(client, ())
}

/// A Tier cache of `resource` on its own watch, with the start-up backoff (reset only once
/// the API server answered; see [`tier_kube::backoff`]).
pub(crate) fn watch_resource<T: KubeTier>(
    client: &kube::Client,
    resource: T::DynamicType,
) -> Result<KubeLister<T>, tier_kube::lister::ListerError> {
    KubeLister::watch_with_backoff(
        client.clone(),
        resource,
        watcher::Config::default(),
        RetryBackoff::default(),
    )
}

/// The `tier-cache-synced` check on `lister`, its reason carrying the watch's last error.
fn cache_synced<C: Backend>(lister: &KubeLister<C::Object>) -> CacheSynced {
    let stats = lister.clone();
    let cache: Arc<dyn TierLister<C>> = Arc::new(lister.clone());
    CacheSynced::of(cache).with_last_error(move || stats.watch_stats().last_error)
}

/// tierd running for controller `C` (Antrea by default); see the [crate docs](crate).
/// Dropping it stops the driver (no write starts after) and the background tasks; the
/// caches' watches stop once the routers are dropped too. [`shutdown`](Self::shutdown) also
/// waits for the driver to end.
pub struct Tierd<C: Backend = Antrea> {
    ensurer: Ensurer,
    elector: Option<Elector>,
    status: StatusHandle,
    lister: KubeLister<C::Object>,
    readiness: Readiness,
    shutdown: Shutdown,
    parts: C::Parts,
    authorizer: Option<Arc<dyn tier_server::auth::Authorizer>>,
    health: HealthConfig,
    tasks: Tasks,
}

impl<C: Backend> fmt::Debug for Tierd<C>
where
    C::Parts: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tierd")
            .field("controller", &C::NAME)
            .field("status", &self.status.current())
            .field("parts", &self.parts)
            .finish_non_exhaustive()
    }
}

/// tierd's background tasks (Events, the certificate), aborted when dropped, and the
/// driver's cancellation, cancelled then: a dropped [`Tierd`] starts no write.
#[derive(Debug, Default)]
struct Tasks {
    handles: Vec<JoinHandle<()>>,
    driver: Option<tokio_util::sync::CancellationToken>,
    /// The Events about the Lease, awaited briefly at shutdown so that the release is told.
    leader_events: Option<JoinHandle<()>>,
}

impl Drop for Tasks {
    fn drop(&mut self) {
        if let Some(driver) = &self.driver {
            driver.cancel();
        }
        for task in self.handles.iter().chain(&self.leader_events) {
            task.abort();
        }
    }
}

/// How long [`Tierd::shutdown`] waits for the Event telling that the Lease was released.
const LEADER_EVENT_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

impl Tierd<Antrea> {
    /// The controller identity (known, or still being asked).
    pub fn identity(&self) -> &ControllerIdentity {
        self.parts.identity()
    }
}

impl<C: Backend> Tierd<C> {
    /// A builder for tierd on `clients`, ensuring `desired` (the controller is the set's:
    /// `DesiredSet::antrea()` or `DesiredSet::<Calico>::calico()`).
    pub fn builder(clients: Clients, desired: DesiredSet<C>) -> Builder<C> {
        Builder {
            clients,
            desired,
            tier_cache: None,
            settings: C::settings(),
            writer: WriterConfig::default(),
            driver: DriverConfig::default(),
            events: Events::Kubernetes { instance: None },
            metrics_auth: false,
            ready_requires_tiers: false,
            health: HealthConfig::default(),
            leadership: Leadership::Always,
        }
    }

    /// The driver's status; `status().initialized()` resolves once every Tier converged once.
    pub fn status(&self) -> StatusHandle {
        self.status.clone()
    }

    /// Resolves once every desired Tier has converged once (latched).
    ///
    /// # Errors
    ///
    /// [`DriverStopped`] if the driver stopped before.
    pub async fn initialized(&self) -> Result<(), DriverStopped> {
        self.status.clone().initialized().await
    }

    /// The Tier cache (tierd's own watch, or the embedder's).
    pub fn lister(&self) -> &KubeLister<C::Object> {
        &self.lister
    }

    /// The readiness registry: every check of tierd; register the embedder's own here.
    pub fn readiness(&self) -> &Readiness {
        &self.readiness
    }

    /// The shutdown signal: trigger it first on SIGTERM so `/readyz` fails at once; servers
    /// drain on it ([`Shutdown::drained`]). [`shutdown`](Self::shutdown) triggers it too.
    pub fn shutdown_signal(&self) -> &Shutdown {
        &self.shutdown
    }

    /// `/livez`, `/readyz` and their per-check paths, for the probe port (plain HTTP).
    pub fn probes(&self) -> Router {
        Routes::new(self.readiness.clone())
            .health(self.health.clone())
            .into_ports()
            .probes
    }

    /// Whether this controller has a Tier webhook (Antrea: yes; Calico: no, it protects its
    /// built-in Tiers itself).
    pub fn has_webhook(&self) -> bool {
        C::webhook(&self.parts).is_some()
    }

    /// `POST /validate/tier`, for the webhook port (TLS): CREATE once the Tier cache synced,
    /// DELETE once the policy caches did too, an UPDATE changing a priority once the identity
    /// is known. Without a webhook ([`has_webhook`](Self::has_webhook) false): no routes.
    pub fn webhook(&self) -> Router {
        C::webhook(&self.parts).unwrap_or_default()
    }

    /// `/metrics` from `registry` with tierd's metrics added (bring the caller's own, or
    /// `Registry::default()`), protected when [`Builder::metrics_auth`] is on.
    pub fn metrics(&self, mut registry: Registry) -> Router {
        tier_server::metrics::register(&mut registry, self.status.clone());
        let router = Routes::new(self.readiness.clone())
            .metrics(Arc::new(registry))
            .into_ports()
            .metrics
            .unwrap_or_default();
        match &self.authorizer {
            Some(authorizer) => tier_server::auth::protect(router, Arc::clone(authorizer)),
            None => router,
        }
    }

    /// Every route on one router (probes, metrics, webhook), for an embedder's own server.
    pub fn router(&self, registry: Registry) -> Router {
        self.probes()
            .merge(self.metrics(registry))
            .merge(self.webhook())
    }

    /// Resolves once the self-signed certificate is settled (the files hold it), at once
    /// without [`Builder::self_signed_cert`]; never if tierd shuts down before.
    pub fn certificate_settled(&self) -> impl Future<Output = ()> + Send + 'static {
        let certificate = C::certificate(&self.parts);
        async move {
            let Some(mut check) = certificate else {
                return;
            };
            if check.wait_for(CheckState::is_ok).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// What tierd's leader elector knows, with [`Leadership::Lease`].
    pub fn leader(&self) -> Option<watch::Receiver<tier_kube::lease::LeaderStatus>> {
        self.elector.as_ref().map(Elector::status)
    }

    /// Stops tierd: readiness fails at once, no write starts after this call, the
    /// background tasks end; with [`Leadership::Lease`], once the driver has stopped, the
    /// Lease is released (one call, bounded by half the renew deadline) so that a standby
    /// takes over within one retry period. Returns how the driver stopped.
    pub async fn shutdown(self) -> Stopped {
        self.shutdown.trigger();
        let Tierd {
            ensurer,
            elector,
            mut tasks,
            ..
        } = self;
        tasks.driver = None;
        let leader_events = tasks.leader_events.take();
        drop(tasks);
        let stopped = ensurer.shutdown().await;
        if let Some(elector) = elector {
            elector.release().await;
        }
        if let Some(mut events) = leader_events
            && tokio::time::timeout(LEADER_EVENT_GRACE, &mut events)
                .await
                .is_err()
        {
            events.abort();
            tracing::debug!("the leader election Event was not published in time");
        }
        stopped
    }
}

#[cfg(test)]
mod tests;

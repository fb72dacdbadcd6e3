//! A small kube-rs controller that embeds tierd: the example behind README's "Embedding tierd".
//!
//! The controller's own job is deliberately small: it labels every Tier
//! `example.tierd.dev/seen=true`. What it shows is the wiring an embedder needs:
//!
//! 1. **One client.** [`run`] builds one shared [`kube::Client`] (kube's retries on) from a
//!    `kube::Config`; tierd's writer gets its own no-retry client from the same config
//!    ([`tier_kube::client::writer_client`]).
//! 2. **One Tier watch.** The controller's own reflector feeds tierd's lister
//!    ([`KubeLister::shared`]); the writer is made from that lister, so its updates start from
//!    the same store and keep the controller's labels.
//! 3. **The ensurer** runs in continuous mode ([`tier_runtime::spawn`]).
//! 4. **tierd's routes beside the controller's own**: `/livez`, `/readyz` and
//!    `/validate/tier` from [`tier_server::Routes`], merged into the controller's axum router
//!    with its `/tiers`. The controller's own check joins `/readyz?verbose` by registering it
//!    (informational here: it waits for the Tiers, and `/readyz` must not, see
//!    [`tier_server::health`]).
//! 5. **The reconciler starts after `initialized()`** ([`ensure_then`]).
//! 6. **The webhook's controller user** is the controller's own identity
//!    ([`tier_kube::identity::whoami`]), so its own priority corrections are allowed.
//!
//! `tests/testserver.rs` runs [`run`] against the test API server; `tests/ports.rs` shows
//! how an embedder unit-tests its own code on mocked ports and the in-memory backend.

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use futures::StreamExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use tier_core::admission::AdmissionPolicy;
use tier_core::{DesiredSet, DriverConfig, Mode, TierLister, TierWriter};
use tier_kube::{KubeLister, Tier, WriterConfig};
use tier_runtime::Ensurer;
use tier_server::readiness::{CacheSynced, CheckState};
use tier_server::{Readiness, Routes, Shutdown, Webhook};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// The label the controller puts on every Tier.
pub const SEEN_LABEL: &str = "example.tierd.dev/seen";

/// The controller's own readiness check: passes once its reconciler runs.
pub const RECONCILER_CHECK: &str = "example-reconciler";

/// The controller failed to start or to serve.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// tierd's driver configuration is out of range.
    #[error(transparent)]
    Config(#[from] tier_core::ConfigError),
    /// No client could be built from the configuration.
    #[error(transparent)]
    Client(#[from] tier_kube::ClientError),
    /// The API server could not say who this controller is (set the user explicitly).
    #[error(transparent)]
    Identity(#[from] tier_kube::IdentityError),
    /// The HTTP server failed.
    #[error("the HTTP server failed: {0}")]
    Serve(#[source] std::io::Error),
}

/// What [`ensure_then`] started: tierd's ensurer, and the task that runs the reconciler.
pub type Started<T> = (Ensurer, JoinHandle<Option<T>>);

/// Starts tierd's ensurer on `lister` and `writer` (continuous mode), and `reconciler` once
/// every desired Tier has converged once. The returned task ends with `None` if the ensurer
/// stopped before that: the reconciler then never starts.
///
/// Generic over tierd's ports, so an embedder tests it without a cluster (`tests/ports.rs`).
///
/// # Errors
///
/// [`Error::Config`] if `config` is out of range; nothing is started.
pub fn ensure_then<L, W, F>(
    lister: L,
    writer: W,
    desired: DesiredSet,
    config: DriverConfig,
    reconciler: F,
) -> Result<Started<F::Output>, Error>
where
    L: TierLister + 'static,
    W: TierWriter + 'static,
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let ensurer = tier_runtime::spawn(lister, writer, desired, config, Mode::Continuous)?;
    let mut status = ensurer.status();
    let reconciler = tokio::spawn(async move {
        status.initialized().await.ok()?;
        Some(reconciler.await)
    });
    Ok((ensurer, reconciler))
}

/// The names of the Tiers `lister` observes, sorted; `None` before its first complete list.
pub fn tier_names(lister: &dyn TierLister) -> Option<Vec<String>> {
    let snapshot = lister.snapshot();
    snapshot.tiers.map(|tiers| tiers.keys().cloned().collect())
}

/// Runs the controller on `config`, serving on `listener`, until `shutdown` resolves.
///
/// # Errors
///
/// A client that cannot be built, an API server that cannot say who the controller is, or a
/// failed HTTP server.
pub async fn run(
    config: kube::Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    // 1. One shared client (kube's defaults); the writer's, without retries, from one config.
    let client = tier_kube::client::client_from_config(config.clone())?;
    let writer_client = tier_kube::client::writer_client(config)?;
    // 6. The webhook lets this controller's own identity change priorities.
    let user = tier_kube::identity::whoami(&client).await?;

    // 2. The controller's Tier reflector, shared with tierd: one list, one watch.
    let (store, store_writer) = reflector::store::<Tier>();
    let (lister, mut feed) = KubeLister::shared(store.clone());
    let (changed_tx, changed_rx) = mpsc::unbounded_channel();
    let tiers = reflector::reflector(
        store_writer,
        watcher(Api::all(client.clone()), watcher::Config::default()),
    )
    .default_backoff()
    .inspect(move |event| feed.observe(event))
    .applied_objects();
    let watch = tokio::spawn(async move {
        let mut tiers = std::pin::pin!(tiers);
        while let Some(tier) = tiers.next().await {
            if let Ok(tier) = tier {
                // The reconciler may not run yet: the channel keeps the names.
                let _ = changed_tx.send(tier.name_any());
            }
        }
    });

    // 3 and 5. tierd's ensurer; the controller's reconciler once the system Tiers exist.
    let writer = lister.writer(writer_client, WriterConfig::default());
    let (started_tx, started) = watch::channel(CheckState::failed(
        "waiting for tierd to initialize the system Tiers",
    ));
    let reconciler = reconcile(
        Api::all(client.clone()),
        store.clone(),
        changed_rx,
        started_tx,
    );
    let (ensurer, reconciler) = ensure_then(
        lister.clone(),
        writer,
        DesiredSet::antrea(),
        DriverConfig::default(),
        reconciler,
    )?;

    // 4. tierd's routes in the controller's router, its own check in the registry.
    let stop = Shutdown::new();
    let cache: Arc<dyn TierLister> = Arc::new(lister.clone());
    let readiness = Readiness::standard(ensurer.status(), CacheSynced::new(cache.clone()), &stop);
    readiness.register_informational(RECONCILER_CHECK, started);
    let tierd = Routes::new(readiness.clone())
        .webhook(Webhook::new(
            cache,
            AdmissionPolicy::antrea(user),
            &readiness,
        ))
        .into_router();
    let router = Router::new()
        .route("/tiers", get(list_tiers).with_state(lister))
        .merge(tierd);

    let served = axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            shutdown.await;
            stop.trigger();
        })
        .await
        .map_err(Error::Serve);
    ensurer.shutdown().await;
    reconciler.abort();
    watch.abort();
    served
}

/// `GET /tiers`: the observed Tier names, one a line; 503 before the first list.
async fn list_tiers(State(lister): State<KubeLister>) -> (StatusCode, String) {
    match tier_names(&lister) {
        Some(names) => (StatusCode::OK, names.join("\n") + "\n"),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the Tier cache has not synced\n".to_owned(),
        ),
    }
}

/// The controller's reconciler: labels every Tier in the store, then every Tier that changes.
async fn reconcile(
    api: Api<Tier>,
    store: Store<Tier>,
    mut changed: mpsc::UnboundedReceiver<String>,
    started: watch::Sender<CheckState>,
) {
    started.send_replace(CheckState::Ok);
    for tier in store.state() {
        label(&api, &tier).await;
    }
    while let Some(name) = changed.recv().await {
        if let Some(tier) = store.get(&ObjectRef::new(&name)) {
            label(&api, &tier).await;
        }
    }
}

/// Puts [`SEEN_LABEL`] on `tier` with a merge patch, unless it is there already.
async fn label(api: &Api<Tier>, tier: &Tier) {
    if tier.labels().contains_key(SEEN_LABEL) {
        return;
    }
    let name = tier.name_any();
    let patch = serde_json::json!({"metadata": {"labels": {SEEN_LABEL: "true"}}});
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => tracing::info!(tier = %name, "labelled"),
        // The next change of this Tier brings it back; a real controller would requeue.
        Err(error) => tracing::warn!(tier = %name, %error, "cannot label Tier"),
    }
}

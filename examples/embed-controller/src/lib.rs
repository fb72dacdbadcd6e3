//! A small kube-rs controller that embeds tierd: the example behind README's "Embedding tierd".
//!
//! The controller's own job is deliberately small: it labels every Tier
//! `example.tierd.dev/seen=true`. What it shows is how little an embedder wires:
//!
//! 1. **One configuration, two clients** ([`tierd::Clients`]): the shared one for the
//!    controller and tierd's watches, the writer's without kube's retries.
//! 2. **One Tier watch.** The controller's own reflector feeds tierd's lister
//!    ([`KubeLister::shared`]), handed to the builder ([`tierd::Builder::tier_cache`]); tierd's
//!    writer updates from that store, so the controller's labels survive tierd's corrections.
//! 3. **tierd itself**: [`tierd::Tierd::builder`] and `start`. It brings the policy caches,
//!    the reservations shared by its writer and its webhook, its identity (asked of the API
//!    server in the background), Events and every readiness check.
//! 4. **tierd's routes beside the controller's own** ([`tierd::Tierd::router`]), and the
//!    controller's check in tierd's registry (informational: it waits for the Tiers, and
//!    `/readyz` must not, see [`tier_server::health`]).
//! 5. **The reconciler starts after `initialized()`** ([`after_initialized`]).
//!
//! `tests/cluster.rs` runs [`run`] against a real kube-apiserver, as the cluster's webhook
//! too; `tests/ports.rs` shows how an embedder unit-tests its own code on mocked ports and the
//! in-memory backend.

use std::future::Future;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use futures::StreamExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use prometheus_client::registry::Registry;
use tier_core::{DesiredSet, StatusHandle, TierLister};
use tier_kube::crd::Tier;
use tier_kube::lister::KubeLister;
use tier_server::readiness::CheckState;
use tierd::{Clients, Tierd};
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
    Client(#[from] tier_kube::client::ClientError),
    /// tierd could not start (only outside a tokio runtime).
    #[error(transparent)]
    Start(#[from] tierd::StartError),
    /// The HTTP server failed.
    #[error("the HTTP server failed: {0}")]
    Serve(#[source] std::io::Error),
}

/// Starts `reconciler` once every desired Tier has converged once (`status` from
/// [`Tierd::status`] or any ensurer). The task ends with `None` if the driver stopped before
/// that: the reconciler then never starts.
///
/// Generic over where the status comes from, so an embedder tests it without a cluster
/// (`tests/ports.rs`).
pub fn after_initialized<F>(
    mut status: StatusHandle,
    reconciler: F,
) -> JoinHandle<Option<F::Output>>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio::spawn(async move {
        status.initialized().await.ok()?;
        Some(reconciler.await)
    })
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
/// A client that cannot be built from `config`, or a failed HTTP server. Nothing the API
/// server does: tierd waits for it behind its readiness checks.
pub async fn run(
    config: kube::Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    // 1. Two clients from one configuration.
    let clients = Clients::from_config(config)?;
    let client = clients.shared().clone();

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

    // 3. tierd.
    let tierd = Tierd::builder(clients, DesiredSet::antrea())
        .tier_cache(lister.clone())
        .start()?;

    // 4 and 5. The controller's check and routes beside tierd's; its reconciler once the
    // system Tiers exist.
    let (started_tx, started) = watch::channel(CheckState::failed(
        "waiting for tierd to initialize the system Tiers",
    ));
    tierd
        .readiness()
        .register_informational(RECONCILER_CHECK, started);
    let reconciler = after_initialized(
        tierd.status(),
        reconcile(Api::all(client), store, changed_rx, started_tx),
    );
    let router = Router::new()
        .route("/tiers", get(list_tiers).with_state(lister))
        .merge(tierd.router(Registry::default()));

    let stop = tierd.shutdown_signal().clone();
    let served = axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            shutdown.await;
            stop.trigger();
        })
        .await
        .map_err(Error::Serve);
    tierd.shutdown().await;
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

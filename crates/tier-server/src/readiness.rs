//! The readiness gate: a registry of named checks that handlers declare they depend on.
//!
//! A [`Check`] reports [`CheckState::Ok`] or [`CheckState::Failed`] with a reason whenever it is
//! asked; nothing runs in the background. A [`Readiness`] registry maps names to checks. Each
//! handler declares the checks it needs, either as a layer ([`Readiness::require`], answering
//! 503 with the failed checks) or in-band ([`Readiness::gate`], for handlers that must answer in
//! their own format, like the webhook). A handler therefore never reads a cache that is not
//! ready, and the server itself never waits for anything before it starts serving.
//!
//! The standard checks:
//!
//! | name | passes when | from |
//! |---|---|---|
//! | [`TIER_CACHE_SYNCED`] | the Tier cache has completed its first list | [`CacheSynced`] (the lister the webhook reads) |
//! | [`SYSTEM_TIERS`] | every system Tier has converged **once** (latched) | [`SystemTiers`] (`Status.initialized`) |
//! | [`TIERS_UNOBSTRUCTED`] | no desired Tier is blocked, denied, forbidden, not installed or contested **now** | [`TiersUnobstructed`] (`Status.tiers`) |
//! | [`SHUTDOWN`] | shutdown has not started | [`Shutdown::check`] |
//! | [`ACNP_CACHE_SYNCED`], [`ANNP_CACHE_SYNCED`] | the Antrea ClusterNetworkPolicy / NetworkPolicy cache has listed, or found its CRD not installed | registered by whoever starts the caches (tierd: `tier_kube::policies::PolicyCache`) |
//! | [`LEADER_ELECTION`] | this replica leads (informational: a standby stays Ready) | registered by tierd with leader election on |
//!
//! The two policy checks are **not** in the default `/readyz`: only the webhook's DELETE reads
//! the policy caches, and it refuses in-band while they are unsynced. If readiness waited for
//! them, a policy watch that cannot list (missing RBAC, an unreachable conversion webhook, an API
//! server slow to serve 10,000 policies) would keep the pod out of its Service, and then every
//! Tier create, tierd's own included, would fail on the unreachable webhook: the seed's deadlock.
//! They show in `/readyz?verbose` only if added to the readyz set; each is always at
//! `/readyz/<name>`.
//!
//! # `/readyz`
//!
//! Registering a check is all it takes for it to join `/readyz`
//! ([`register`](Readiness::register)). A check registered with
//! [`register_informational`](Readiness::register_informational) is listed by
//! `/readyz?verbose` and answers at `/readyz/<name>`, but does not fail `/readyz`. The standard
//! `system-tiers` check is informational (see [`Readiness::standard`] and
//! [`health`](crate::health) for the deadlock that avoids); registering it again with
//! `register` makes it required.
//!
//! `system-tiers` is latched ("initialized once"), like kube-apiserver's post-start hooks: a
//! Tier that drifts later is corrected by the driver and shows in the metrics
//! (`tierd_tier_state`, `tierd_tiers_blocked`), not as a readiness flap that would take the
//! webhook out of its Service while the correction may need it. Until it passes, its reason names
//! every Tier that is not converged, with the server's message for a blocked one.
//!
//! What stands in a Tier's way *now*, before or after initialization, is the standard
//! `tiers-unobstructed` check, always informational: `/readyz?verbose` lists it as
//! `[-]tiers-unobstructed failed (informational): 1 of 6 desired Tiers ...: org-security denied
//! ...` while a Tier is blocked, denied, forbidden, not installed or contested, with the
//! server's message, and as `[+]tiers-unobstructed ok (informational)` otherwise. kube-apiserver's
//! format has no reason on a passing line, so this is a check of its own rather than a remark on
//! `system-tiers`, and it never fails `/readyz`: the webhook that may be needed to clear the
//! obstruction is reached only through Ready pods.
//!
//! ```
//! use axum::{Router, routing::get};
//! use tier_server::readiness::{CheckState, Readiness, Shutdown, SHUTDOWN};
//!
//! let shutdown = Shutdown::new();
//! let (synced, cache) = tokio::sync::watch::channel(CheckState::failed("not listed yet"));
//! let readiness = Readiness::new();
//! readiness.register("tier-cache-synced", cache);
//! readiness.register(SHUTDOWN, shutdown.check());
//!
//! // This route answers 503 until the cache check passes.
//! let router: Router = Router::new()
//!     .route("/tiers", get(|| async { "..." }))
//!     .route_layer(readiness.require(&["tier-cache-synced"]));
//! assert!(readiness.gate(&["tier-cache-synced"]).check().is_err());
//! synced.send_replace(CheckState::Ok);
//! assert!(readiness.gate(&["tier-cache-synced"]).check().is_ok());
//! # let _ = router;
//! ```

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, PoisonError, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tier_core::{Controller, Status, StatusHandle, TierLister, TierState, TierStatus};
use tokio::sync::watch;

/// The check that passes once the Tier cache has completed its first list.
pub const TIER_CACHE_SYNCED: &str = "tier-cache-synced";
/// The check that passes once the Antrea ClusterNetworkPolicy cache has listed (or found the CRD
/// not installed). Needed by the webhook's DELETE only; not part of the default `/readyz`.
pub const ACNP_CACHE_SYNCED: &str = "acnp-cache-synced";
/// The check that passes once the Antrea NetworkPolicy cache has listed (or found the CRD not
/// installed). Needed by the webhook's DELETE only; not part of the default `/readyz`.
pub const ANNP_CACHE_SYNCED: &str = "annp-cache-synced";
/// The check that passes once every system Tier has converged at least once.
pub const SYSTEM_TIERS: &str = "system-tiers";
/// The informational check that fails while a desired Tier is blocked, denied, forbidden, not
/// installed or contested, naming each and why.
pub const TIERS_UNOBSTRUCTED: &str = "tiers-unobstructed";
/// The check that fails as soon as shutdown starts.
pub const SHUTDOWN: &str = "shutdown";
/// The check that passes while this replica leads (may write Tiers); informational, registered
/// only when leader election is on (tierd's Lease or the embedder's signal): a standby stays
/// Ready, since it serves the webhook too.
pub const LEADER_ELECTION: &str = "leader-election";

/// The state of one check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckState {
    /// The check passes.
    Ok,
    /// The check fails, for this reason (one line, meant for a person).
    Failed(String),
}

impl CheckState {
    /// A failed state with `reason`.
    pub fn failed(reason: impl Into<String>) -> Self {
        CheckState::Failed(reason.into())
    }

    /// Whether the check passes.
    pub fn is_ok(&self) -> bool {
        matches!(self, CheckState::Ok)
    }
}

/// A named condition a handler may depend on. Evaluated on every request that needs it, so it
/// must be cheap and must not block.
pub trait Check: Send + Sync + 'static {
    /// The current state.
    fn state(&self) -> CheckState;
}

/// A check fed by a watch channel: its latest value.
impl Check for watch::Receiver<CheckState> {
    fn state(&self) -> CheckState {
        self.borrow().clone()
    }
}

/// A check computed by a closure; see [`from_fn`].
#[derive(Clone, Copy, Debug)]
pub struct FnCheck<F>(F);

/// A check computed by `f` whenever it is asked.
pub fn from_fn<F: Fn() -> CheckState + Send + Sync + 'static>(f: F) -> FnCheck<F> {
    FnCheck(f)
}

impl<F: Fn() -> CheckState + Send + Sync + 'static> Check for FnCheck<F> {
    fn state(&self) -> CheckState {
        (self.0)()
    }
}

/// Where the latest driver [`Status`] comes from: a [`StatusHandle`], or a watch receiver (for
/// tests and for code that publishes a status by hand).
pub trait StatusSource: fmt::Debug + Send + Sync + 'static {
    /// The latest status.
    fn current(&self) -> Status;
}

impl StatusSource for StatusHandle {
    fn current(&self) -> Status {
        StatusHandle::current(self)
    }
}

impl StatusSource for watch::Receiver<Status> {
    fn current(&self) -> Status {
        self.borrow().clone()
    }
}

impl<S: StatusSource> StatusSource for Arc<S> {
    fn current(&self) -> Status {
        S::current(self)
    }
}

/// [`TIER_CACHE_SYNCED`], the one "cache synced" signal: passes once the Tier lister's
/// snapshot is synced (its first complete list). Built on the lister the webhook reads, so the
/// gate and the reads can never disagree; [`with_last_error`](Self::with_last_error) adds why
/// it has not synced yet (a missing CRD, missing RBAC) to the reason. Works for the lister of
/// any controller's Tiers.
#[derive(Clone)]
pub struct CacheSynced {
    synced: Arc<dyn Fn() -> bool + Send + Sync>,
    last_error: Option<Arc<dyn Fn() -> Option<String> + Send + Sync>>,
}

impl fmt::Debug for CacheSynced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CacheSynced")
            .field("synced", &(self.synced)())
            .finish_non_exhaustive()
    }
}

impl CacheSynced {
    /// The check on `lister` (Antrea's Tiers; [`of`](Self::of) for any controller's).
    pub fn new(lister: Arc<dyn TierLister>) -> Self {
        Self::of(lister)
    }

    /// The check on `lister` of any controller's Tiers.
    pub fn of<C: Controller>(lister: Arc<dyn TierLister<C>>) -> Self {
        Self {
            synced: Arc::new(move || lister.snapshot().is_synced()),
            last_error: None,
        }
    }

    /// Adds `last_error` (e.g. the watch's last error) to the reason while not synced.
    #[must_use]
    pub fn with_last_error(
        mut self,
        last_error: impl Fn() -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.last_error = Some(Arc::new(last_error));
        self
    }
}

impl Check for CacheSynced {
    fn state(&self) -> CheckState {
        if (self.synced)() {
            return CheckState::Ok;
        }
        match self.last_error.as_ref().and_then(|f| f()) {
            Some(error) => CheckState::failed(format!(
                "the Tier cache has not completed its first list; last error: {error}"
            )),
            None => CheckState::failed("the Tier cache has not completed its first list"),
        }
    }
}

/// [`SYSTEM_TIERS`] from a driver status: passes once `Status.initialized` (latched). See the
/// [module docs](self) for why it is latched.
#[derive(Clone, Debug)]
pub struct SystemTiers<S>(pub S);

impl<S: StatusSource> Check for SystemTiers<S> {
    fn state(&self) -> CheckState {
        system_tiers_state(&self.0.current())
    }
}

/// The [`SYSTEM_TIERS`] state of `status`: ok once initialized, else a reason naming every Tier
/// that is not converged (with the server's message for a blocked one).
pub(crate) fn system_tiers_state(status: &Status) -> CheckState {
    if status.initialized {
        return CheckState::Ok;
    }
    if status.stopped {
        return CheckState::failed(
            "the Tier driver stopped before the system Tiers were initialized",
        );
    }
    if !status.synced {
        return CheckState::failed("the Tier cache has not completed its first list");
    }
    let waiting: Vec<String> = status.unconverged().map(describe).collect();
    if waiting.is_empty() {
        return CheckState::failed("waiting for the Tier driver to publish its first status");
    }
    let standby = if status.standby {
        " (this replica is on standby: the leader writes them)"
    } else {
        ""
    };
    CheckState::Failed(format!(
        "system Tiers not initialized{standby}: {}",
        waiting.join("; ")
    ))
}

fn describe(tier: &TierStatus) -> String {
    tier.to_string()
}

/// [`TIERS_UNOBSTRUCTED`] from a driver status: fails while a desired Tier is blocked, denied,
/// forbidden, not installed or contested, naming each with its cause; not latched. Register it
/// informational (as [`Readiness::standard`] does): see the [module docs](self).
#[derive(Clone, Debug)]
pub struct TiersUnobstructed<S>(pub S);

impl<S: StatusSource> Check for TiersUnobstructed<S> {
    fn state(&self) -> CheckState {
        tiers_unobstructed_state(&self.0.current())
    }
}

/// Whether a Tier in `state` needs a person: it cannot be written (blocked, denied, forbidden,
/// not installed), or someone keeps changing it back (contested).
fn obstructed(state: &TierState) -> bool {
    crate::metrics::cannot_be_written(state) || matches!(state, TierState::Contested { .. })
}

/// The [`TIERS_UNOBSTRUCTED`] state of `status`.
pub(crate) fn tiers_unobstructed_state(status: &Status) -> CheckState {
    let obstructed: Vec<String> = status
        .tiers
        .iter()
        .filter(|tier| obstructed(&tier.state))
        .map(describe)
        .collect();
    if obstructed.is_empty() {
        return CheckState::Ok;
    }
    CheckState::Failed(format!(
        "{} of {} desired Tiers cannot be kept as desired: {}",
        obstructed.len(),
        status.tiers.len(),
        obstructed.join("; ")
    ))
}

/// The shutdown signal: [`trigger`](Self::trigger) it first thing on SIGTERM, so that the
/// [`SHUTDOWN`] check fails at once and kube-proxy stops sending traffic while the server
/// drains. Cheap to clone; all clones share one signal.
#[derive(Clone, Debug)]
pub struct Shutdown {
    tx: Arc<watch::Sender<bool>>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    /// A signal that has not fired.
    pub fn new() -> Self {
        Self {
            tx: Arc::new(watch::channel(false).0),
        }
    }

    /// Starts shutdown. Idempotent.
    pub fn trigger(&self) {
        self.tx.send_replace(true);
    }

    /// Whether shutdown has started.
    pub fn is_triggered(&self) -> bool {
        *self.tx.borrow()
    }

    /// Resolves once shutdown has started.
    pub async fn triggered(&self) {
        let mut rx = self.tx.subscribe();
        // The sender lives in `self`, so waiting cannot fail.
        let _ = rx.wait_for(|triggered| *triggered).await;
    }

    /// Resolves `delay` after shutdown has started: the graceful-shutdown future for
    /// [`Server::serve`](crate::server::Server::serve), leaving time for the endpoints to drop this
    /// pod (kube-apiserver's `--shutdown-delay-duration`).
    pub fn drained(&self, delay: Duration) -> impl Future<Output = ()> + Send + 'static {
        let this = self.clone();
        async move {
            this.triggered().await;
            tokio::time::sleep(delay).await;
        }
    }

    /// The [`SHUTDOWN`] check: fails with "shutting down" once triggered.
    pub fn check(&self) -> ShutdownCheck {
        ShutdownCheck(self.tx.subscribe())
    }
}

/// The [`SHUTDOWN`] check; see [`Shutdown::check`].
#[derive(Debug)]
pub struct ShutdownCheck(watch::Receiver<bool>);

impl Check for ShutdownCheck {
    fn state(&self) -> CheckState {
        if *self.0.borrow() {
            CheckState::failed("shutting down")
        } else {
            CheckState::Ok
        }
    }
}

/// One evaluated check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckResult {
    /// The check's name.
    pub name: String,
    /// Its state when evaluated.
    pub state: CheckState,
}

/// Whether a registered check decides `/readyz`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckKind {
    /// Fails `/readyz` while it fails ([`Readiness::register`]).
    Required,
    /// Listed by `/readyz?verbose` and served at `/readyz/<name>`, never fails `/readyz`
    /// ([`Readiness::register_informational`]).
    Informational,
}

type Entries = Vec<(String, CheckKind, Arc<dyn Check>)>;

/// The registry of named checks. Cheap to clone; all clones share one registry, so a check
/// registered later is seen by gates created earlier.
#[derive(Clone, Default)]
pub struct Readiness {
    entries: Arc<RwLock<Entries>>,
}

impl fmt::Debug for Readiness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Readiness")
            .field("checks", &self.names())
            .finish()
    }
}

impl Readiness {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// A registry holding the four standard checks: [`TIER_CACHE_SYNCED`] (`cache`) and
    /// [`SHUTDOWN`] (`shutdown`), required, and [`SYSTEM_TIERS`] and [`TIERS_UNOBSTRUCTED`]
    /// (`status`), informational: see the [`health`](crate::health) module for why `/readyz`
    /// must not wait for the Tiers by default.
    pub fn standard<S: StatusSource>(status: S, cache: CacheSynced, shutdown: &Shutdown) -> Self {
        let status = Arc::new(status);
        let readiness = Self::new();
        readiness
            .register(TIER_CACHE_SYNCED, cache)
            .register(SHUTDOWN, shutdown.check())
            .register_informational(SYSTEM_TIERS, SystemTiers(Arc::clone(&status)))
            .register_informational(TIERS_UNOBSTRUCTED, TiersUnobstructed(status));
        readiness
    }

    /// Registers `check` as `name`, required: from now on it is part of `/readyz`. A check
    /// registered under an existing name replaces it (and its kind) in place: the listing
    /// order stays the order of first registration.
    pub fn register(&self, name: impl Into<String>, check: impl Check) -> &Self {
        self.insert(name.into(), CheckKind::Required, Arc::new(check))
    }

    /// Registers `check` as `name`, informational: listed by `/readyz?verbose` and served at
    /// `/readyz/<name>`, but never failing `/readyz`. Replaces a check of the same name, as
    /// [`register`](Self::register) does.
    pub fn register_informational(&self, name: impl Into<String>, check: impl Check) -> &Self {
        self.insert(name.into(), CheckKind::Informational, Arc::new(check))
    }

    fn insert(&self, name: String, kind: CheckKind, check: Arc<dyn Check>) -> &Self {
        let mut entries = self.entries.write().unwrap_or_else(PoisonError::into_inner);
        match entries.iter_mut().find(|(n, _, _)| *n == name) {
            Some(entry) => *entry = (name, kind, check),
            None => entries.push((name, kind, check)),
        }
        self
    }

    /// The names of the registered checks, in registration order.
    pub fn names(&self) -> Vec<String> {
        self.snapshot()
            .into_iter()
            .map(|(name, _, _)| name)
            .collect()
    }

    /// Every registered check with its kind, in registration order: what `/readyz` lists.
    pub fn kinds(&self) -> Vec<(String, CheckKind)> {
        self.snapshot()
            .into_iter()
            .map(|(name, kind, _)| (name, kind))
            .collect()
    }

    /// The kind of the check `name`, or `None` if no such check is registered.
    pub fn kind(&self, name: &str) -> Option<CheckKind> {
        let entries = self.entries.read().unwrap_or_else(PoisonError::into_inner);
        entries
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, kind, _)| *kind)
    }

    /// Whether a check called `name` is registered.
    pub fn contains(&self, name: &str) -> bool {
        self.find(name).is_some()
    }

    /// The state of the check `name`, or `None` if no such check is registered.
    pub fn state(&self, name: &str) -> Option<CheckState> {
        self.find(name).map(|check| check.state())
    }

    /// Evaluates the checks `names`, in that order. A name that is not registered fails
    /// ("fail closed"), so a typo in a handler's declaration cannot open it early.
    pub fn evaluate<N: AsRef<str>>(&self, names: &[N]) -> Vec<CheckResult> {
        names
            .iter()
            .map(|name| self.result(name.as_ref()))
            .collect()
    }

    /// Evaluates the check `name`; an unregistered name fails (see [`evaluate`](Self::evaluate)).
    pub fn result(&self, name: &str) -> CheckResult {
        let state = self
            .state(name)
            .unwrap_or_else(|| CheckState::failed("no check of this name is registered"));
        CheckResult {
            name: name.to_owned(),
            state,
        }
    }

    /// A gate over the checks `names`: what a handler holds to declare its dependencies.
    pub fn gate(&self, names: &[&str]) -> Gate {
        Gate {
            readiness: self.clone(),
            names: names.iter().map(|n| (*n).to_owned()).collect(),
        }
    }

    /// A layer answering 503 (with the failed checks) until every check in `names` passes; use
    /// it with [`axum::Router::route_layer`] on the routes that need them.
    pub fn require(&self, names: &[&str]) -> Require {
        Require {
            gate: self.gate(names),
        }
    }

    fn find(&self, name: &str) -> Option<Arc<dyn Check>> {
        let entries = self.entries.read().unwrap_or_else(PoisonError::into_inner);
        entries
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, _, check)| Arc::clone(check))
    }

    fn snapshot(&self) -> Entries {
        self.entries
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The checks one handler depends on; see [`Readiness::gate`].
#[derive(Clone, Debug)]
pub struct Gate {
    readiness: Readiness,
    names: Arc<[String]>,
}

impl Gate {
    /// The declared checks.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// `Ok` when every declared check passes.
    ///
    /// # Errors
    ///
    /// [`NotReady`] listing every failed check. Retryable: ask again later.
    pub fn check(&self) -> Result<(), NotReady> {
        // The fast path, taken on every request once ready: no allocation while every check
        // passes. The first failure evaluates the checks again to list every failed one.
        let all_ok = self.names.iter().all(|name| {
            self.readiness
                .find(name)
                .is_some_and(|check| check.state().is_ok())
        });
        if all_ok {
            return Ok(());
        }
        let failed: Vec<CheckResult> = self
            .readiness
            .evaluate(&self.names)
            .into_iter()
            .filter(|r| !r.state.is_ok())
            .collect();
        if failed.is_empty() {
            // Every check passed on the second look (one just turned ok): ready.
            Ok(())
        } else {
            Err(NotReady { failed })
        }
    }
}

/// Some checks a handler depends on fail. As a response: 503 with `Retry-After: 1` and one
/// `[-]name failed: reason` line per failed check.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not ready: {}", summary(&self.failed))]
pub struct NotReady {
    /// The failed checks.
    pub failed: Vec<CheckResult>,
}

fn summary(failed: &[CheckResult]) -> String {
    failed
        .iter()
        .map(|r| match &r.state {
            CheckState::Ok => format!("{} ok", r.name),
            CheckState::Failed(reason) => format!("{} failed: {}", r.name, one_line(reason)),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// `reason` on one line, so a listing keeps one line per check.
pub(crate) fn one_line(reason: &str) -> String {
    reason.replace(['\r', '\n'], " ")
}

impl IntoResponse for NotReady {
    fn into_response(self) -> Response {
        let mut body = String::from("service unavailable until these checks pass; retry shortly\n");
        for r in &self.failed {
            if let CheckState::Failed(reason) = &r.state {
                body.push_str(&format!("[-]{} failed: {}\n", r.name, one_line(reason)));
            }
        }
        let mut response = (StatusCode::SERVICE_UNAVAILABLE, body).into_response();
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        response
    }
}

/// A tower layer gating a service on a [`Gate`]; see [`Readiness::require`].
#[derive(Clone, Debug)]
pub struct Require {
    gate: Gate,
}

impl<S> tower_layer::Layer<S> for Require {
    type Service = RequireService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequireService {
            gate: self.gate.clone(),
            inner,
        }
    }
}

/// The service made by [`Require`].
#[derive(Clone, Debug)]
pub struct RequireService<S> {
    gate: Gate,
    inner: S,
}

impl<S> tower_service::Service<Request> for RequireService<S>
where
    S: tower_service::Service<Request, Response = Response, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        match self.gate.check() {
            Ok(()) => Box::pin(self.inner.call(request)),
            Err(not_ready) => {
                tracing::debug!(path = %request.uri().path(), %not_ready, "request refused");
                Box::pin(std::future::ready(Ok(not_ready.into_response())))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use tier_core::{ErrorClass, OutcomeCounts};

    use super::*;

    fn tier(name: &str, state: TierState) -> TierStatus {
        TierStatus {
            name: name.into(),
            state,
            outcomes: OutcomeCounts::default(),
            corrections: 0,
            contested: false,
            held: None,
            converged_at: None,
            last_write: None,
        }
    }

    #[test]
    fn system_tiers_names_every_waiting_tier() {
        let status = Status {
            synced: true,
            tiers: vec![
                tier(
                    "baseline",
                    TierState::Blocked {
                        since: Instant::now(),
                        blockers: vec!["mine".into()],
                        reason: "priority 253 is held by Tier mine".into(),
                    },
                ),
                tier("application", TierState::Converged),
                tier("platform", TierState::Pending),
                tier(
                    "networkops",
                    TierState::Retrying {
                        attempt: 2,
                        class: ErrorClass::Transient,
                        error: "connection refused".into(),
                    },
                ),
            ],
            ..Status::default()
        };
        assert_eq!(
            system_tiers_state(&status),
            CheckState::failed(
                "system Tiers not initialized: baseline blocked: priority 253 is held by Tier \
                 mine; platform pending; networkops retrying \
                 after 2 failed attempts (transient): connection refused"
            )
        );
    }

    #[test]
    fn system_tiers_says_when_the_replica_is_on_standby() {
        let status = Status {
            synced: true,
            standby: true,
            tiers: vec![tier("platform", TierState::Pending)],
            ..Status::default()
        };
        assert_eq!(
            system_tiers_state(&status),
            CheckState::failed(
                "system Tiers not initialized (this replica is on standby: the leader writes \
                 them): platform pending"
            )
        );
    }

    #[test]
    fn system_tiers_is_latched() {
        let status = Status {
            synced: true,
            initialized: true,
            tiers: vec![tier("baseline", TierState::Pending)],
            ..Status::default()
        };
        assert_eq!(system_tiers_state(&status), CheckState::Ok);
        let unsynced = Status::default();
        assert_eq!(
            system_tiers_state(&unsynced),
            CheckState::failed("the Tier cache has not completed its first list")
        );
        let stopped = Status {
            stopped: true,
            ..Status::default()
        };
        assert!(!system_tiers_state(&stopped).is_ok());
    }

    #[test]
    fn tiers_unobstructed_names_what_stands_in_a_tiers_way_after_initialization_too() {
        let now = Instant::now();
        let mut status = Status {
            synced: true,
            initialized: true,
            tiers: vec![
                tier("baseline", TierState::Converged),
                tier("networkops", TierState::Pending),
                tier(
                    "application",
                    TierState::Retrying {
                        attempt: 1,
                        class: ErrorClass::Transient,
                        error: "connection refused".into(),
                    },
                ),
            ],
            ..Status::default()
        };
        // Converging, or on its way: nothing for a person to do.
        assert_eq!(tiers_unobstructed_state(&status), CheckState::Ok);
        status.tiers.push(tier(
            "org-security",
            TierState::Denied {
                since: now,
                attempt: 4,
                message: "update to Tier priority is not allowed".into(),
                rule: None,
            },
        ));
        status.tiers.push(tier(
            "platform",
            TierState::Contested {
                streak: 3,
                until: now,
                by: None,
            },
        ));
        // Latched initialization does not hide it, and the kind stays informational.
        assert_eq!(system_tiers_state(&status), CheckState::Ok);
        let CheckState::Failed(reason) = tiers_unobstructed_state(&status) else {
            panic!("a denied and a contested Tier pass");
        };
        assert!(
            reason
                .starts_with("2 of 5 desired Tiers cannot be kept as desired: org-security denied"),
            "{reason}"
        );
        assert!(
            reason.contains("update to Tier priority is not allowed; platform contested"),
            "{reason}"
        );
        let (_tx, rx) = watch::channel(status);
        let cache = CacheSynced::new(Arc::new(tier_core::FixedLister::default()));
        let readiness = Readiness::standard(rx, cache, &Shutdown::new());
        assert_eq!(
            readiness.kind(TIERS_UNOBSTRUCTED),
            Some(CheckKind::Informational)
        );
        assert!(!readiness.state(TIERS_UNOBSTRUCTED).unwrap().is_ok());
    }

    #[test]
    fn unknown_checks_fail_closed_and_later_registrations_count() {
        let readiness = Readiness::new();
        let gate = readiness.gate(&["later"]);
        let err = gate.check().unwrap_err();
        assert_eq!(
            err.to_string(),
            "not ready: later failed: no check of this name is registered"
        );
        readiness.register("later", from_fn(|| CheckState::Ok));
        assert_eq!(gate.check(), Ok(()));
    }

    #[test]
    fn replacing_keeps_the_order() {
        let readiness = Readiness::new();
        readiness
            .register("a", from_fn(|| CheckState::Ok))
            .register("b", from_fn(|| CheckState::Ok))
            .register("a", from_fn(|| CheckState::failed("x")));
        assert_eq!(readiness.names(), ["a", "b"]);
        assert_eq!(readiness.state("a"), Some(CheckState::failed("x")));
    }

    #[test]
    fn registering_decides_the_kind_and_replacing_changes_it() {
        let shutdown = Shutdown::new();
        let (_tx, status) = watch::channel(Status::default());
        let cache = CacheSynced::new(Arc::new(tier_core::FixedLister::default()));
        let readiness = Readiness::standard(status.clone(), cache, &shutdown);
        assert_eq!(
            readiness.kinds(),
            [
                (TIER_CACHE_SYNCED.to_owned(), CheckKind::Required),
                (SHUTDOWN.to_owned(), CheckKind::Required),
                (SYSTEM_TIERS.to_owned(), CheckKind::Informational),
                (TIERS_UNOBSTRUCTED.to_owned(), CheckKind::Informational),
            ]
        );
        readiness.register("mine", from_fn(|| CheckState::Ok));
        assert_eq!(readiness.kind("mine"), Some(CheckKind::Required));
        readiness.register(SYSTEM_TIERS, SystemTiers(status));
        assert_eq!(readiness.kind(SYSTEM_TIERS), Some(CheckKind::Required));
        assert_eq!(readiness.names()[2], SYSTEM_TIERS, "replaced in place");
        assert_eq!(readiness.kind("absent"), None);
    }

    #[test]
    fn cache_synced_follows_the_lister_and_says_why_not() {
        let lister = Arc::new(tier_core::FixedLister::default());
        let check = CacheSynced::new(lister.clone()).with_last_error(|| Some("403".into()));
        assert_eq!(
            check.state(),
            CheckState::failed("the Tier cache has not completed its first list; last error: 403")
        );
        lister.set(tier_core::Snapshot::synced(1, []));
        assert_eq!(check.state(), CheckState::Ok);
    }

    #[tokio::test]
    async fn shutdown_flips_at_once() {
        let shutdown = Shutdown::new();
        let check = shutdown.check();
        assert!(check.state().is_ok());
        shutdown.clone().trigger();
        assert_eq!(check.state(), CheckState::failed("shutting down"));
        assert!(shutdown.is_triggered());
        shutdown.triggered().await;
    }
}

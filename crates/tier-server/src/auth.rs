//! Protecting a router the way controller-runtime protects its metrics endpoint: the caller's
//! bearer token is authenticated with a TokenReview and the request authorized with a
//! SubjectAccessReview of its non-resource path and verb (`get /metrics`), both by the API
//! server, and the answers are cached so a scrape costs the API server nothing most of the time.
//!
//! tier-server knows no Kubernetes client: an [`Authorizer`] does the two reviews (tier-bin's
//! uses kube's client). [`protect`] wraps a router in a [`Gate`] around it:
//!
//! | request | answer |
//! |---|---|
//! | no `Authorization: Bearer` header, or a token the API server does not authenticate | `401` |
//! | a user the API server does not authorize for the verb and path | `403` |
//! | the reviews fail (API server unreachable) | `503` |
//! | an uncached token beyond [`GateConfig::reviews_per_second`], or more than [`GateConfig::max_in_flight`] reviews at once | `429` |
//!
//! What the gate caches, as controller-runtime's `WithAuthenticationAndAuthorization`
//! (TokenReview results one minute, SubjectAccessReview results allowed five minutes, denied
//! thirty seconds):
//!
//! - The key is the SHA-256 of the token with the verb and path, never the token itself.
//! - The [`Authorizer`] makes both reviews in one call, so one entry lives as long as the
//!   shorter of its two results: an allowed request [`GateConfig::token_ttl`] (the TokenReview
//!   must be redone that often, or a revoked token would keep working), a forbidden one
//!   [`GateConfig::denied_ttl`], an unauthenticated token [`GateConfig::token_ttl`]. Failures
//!   (`503`) are not cached.
//! - Allowed and refused entries are kept in two tables of at most [`GateConfig::max_entries`]
//!   each; a full table drops its oldest entry. Bogus tokens only ever land in the refused
//!   table, so a flood of them cannot push out the real scraper's entry.
//! - A cached answer is given at once, without a review and without taking a permit.
//! - A token not in the cache needs a review, and reviews are rate-limited (a token bucket of
//!   [`GateConfig::review_burst`], refilled at [`GateConfig::reviews_per_second`]) and
//!   concurrency-limited ([`GateConfig::max_in_flight`]); beyond either the caller gets `429`
//!   without the API server hearing of it. A flood of distinct bogus tokens therefore costs the
//!   API server at most `reviews_per_second` reviews per second (two API calls each).
//! - An allowed entry that expired stays as a hint until pushed out: its token's re-review
//!   skips the rate limit (it takes a permit), so the real scraper keeps getting `200` across
//!   the expiry while a flood has the bucket empty. Only a token the API server allowed gets
//!   this lane, once per expiry.
//!
//! The scraper needs a ClusterRole granting `nonResourceURLs: ["/metrics"]`, `verbs: ["get"]`;
//! the server needs `create` on `tokenreviews` and `subjectaccessreviews`. Serve the protected
//! router over TLS only: a bearer token over plain HTTP is readable by anyone on the path
//! (`tierd run` refuses `--metrics-auth` without `--tls-cert`).
//!
//! ```
//! use std::sync::Arc;
//!
//! use tier_server::auth::{self, AuthError, Authorizer, Decision};
//!
//! #[derive(Debug)]
//! struct OnlyAlice;
//!
//! #[async_trait::async_trait]
//! impl Authorizer for OnlyAlice {
//!     async fn authorize(&self, token: &str, _verb: &str, _path: &str) -> Result<Decision, AuthError> {
//!         Ok(match token {
//!             "alice-token" => Decision::Allowed { user: "alice".into() },
//!             _ => Decision::Unauthenticated,
//!         })
//!     }
//! }
//!
//! let router = auth::protect(axum::Router::new(), Arc::new(OnlyAlice));
//! # let _ = router;
//! ```

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// The most reviews in flight at once by default; further uncached requests get `429`.
pub const MAX_IN_FLIGHT: usize = 8;

/// What the API server said about a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The token is valid and its user may make the request.
    Allowed {
        /// The authenticated user.
        user: String,
    },
    /// The token is not valid (TokenReview `authenticated: false`).
    Unauthenticated,
    /// The token is valid but its user may not make the request.
    Forbidden {
        /// The authenticated user.
        user: String,
        /// The SubjectAccessReview's reason, if any.
        reason: String,
    },
}

/// The reviews could not be made. Retryable: the next request tries again.
#[derive(Debug, thiserror::Error)]
#[error("cannot review the caller's token: {0}")]
pub struct AuthError(pub String);

/// Authenticates a bearer token and authorizes a non-resource request; see the
/// [module docs](self).
#[async_trait::async_trait]
pub trait Authorizer: fmt::Debug + Send + Sync + 'static {
    /// Whether the user of `token` may `verb` (lowercase HTTP method, e.g. `get`) the
    /// non-resource `path`.
    async fn authorize(&self, token: &str, verb: &str, path: &str) -> Result<Decision, AuthError>;
}

/// The cache and limits of a [`Gate`]; the defaults are controller-runtime's lifetimes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GateConfig {
    /// How long a TokenReview result is trusted: an allowed or unauthenticated entry's
    /// lifetime (default one minute).
    pub token_ttl: Duration,
    /// How long an allowed SubjectAccessReview is trusted (default five minutes; an allowed
    /// entry lives the shorter of this and `token_ttl`).
    pub allowed_ttl: Duration,
    /// How long a denied SubjectAccessReview is trusted (default 30 seconds).
    pub denied_ttl: Duration,
    /// The most entries in each of the allowed and the refused table (default 1024); a full
    /// table drops its oldest entry.
    pub max_entries: usize,
    /// Reviews of uncached tokens the gate starts per second at most (default 5).
    pub reviews_per_second: u32,
    /// Reviews of uncached tokens that may start at once after a quiet spell (default 10).
    pub review_burst: u32,
    /// The most reviews in flight at once (default [`MAX_IN_FLIGHT`]).
    pub max_in_flight: usize,
}

impl Default for GateConfig {
    fn default() -> Self {
        Self {
            token_ttl: Duration::from_secs(60),
            allowed_ttl: Duration::from_secs(5 * 60),
            denied_ttl: Duration::from_secs(30),
            max_entries: 1024,
            reviews_per_second: 5,
            review_burst: 10,
            max_in_flight: MAX_IN_FLIGHT,
        }
    }
}

/// Why the [`Gate`] answered without the API server's decision.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// The token is not cached and the review rate limit is spent.
    #[error("too many new tokens being reviewed; retry shortly")]
    RateLimited,
    /// [`GateConfig::max_in_flight`] reviews are already running.
    #[error("too many requests being authorized; retry shortly")]
    Busy,
    /// The reviews failed.
    #[error(transparent)]
    Failed(#[from] AuthError),
}

/// SHA-256 of the token, verb and path: the cache key (the token itself is never kept).
type Key = [u8; 32];

fn key(token: &str, verb: &str, path: &str) -> Key {
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    for part in [token, verb, path] {
        // Length-prefixed, so no two (token, verb, path) triples hash the same input.
        context.update(&(part.len() as u64).to_be_bytes());
        context.update(part.as_bytes());
    }
    let mut key = [0; 32];
    key.copy_from_slice(context.finish().as_ref());
    key
}

#[derive(Debug)]
struct Entry {
    decision: Decision,
    expires: Instant,
    seq: u64,
}

/// A table of at most `max` entries dropping its oldest (by insertion) when full.
#[derive(Debug, Default)]
struct Table {
    entries: HashMap<Key, Entry>,
    order: BTreeMap<u64, Key>,
}

impl Table {
    fn get(&self, key: &Key) -> Option<&Entry> {
        self.entries.get(key)
    }

    fn remove(&mut self, key: &Key) {
        if let Some(old) = self.entries.remove(key) {
            self.order.remove(&old.seq);
        }
    }

    fn insert(&mut self, key: Key, entry: Entry, max: usize) {
        self.remove(&key);
        while self.entries.len() >= max.max(1) {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.entries.remove(&oldest);
        }
        self.order.insert(entry.seq, key);
        self.entries.insert(key, entry);
    }

    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// A token bucket on tokio's clock (virtual under a paused test clock).
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

#[derive(Debug)]
struct Cache {
    allowed: Table,
    refused: Table,
    bucket: Bucket,
    seq: u64,
}

/// What the cache says about a key.
enum Lookup {
    /// A live entry: answer it.
    Hit(Decision),
    /// An allowed entry that expired: re-review without the rate limit.
    Renew,
    /// Nothing usable: a rate-limited review.
    Miss,
}

/// Counts of what a [`Gate`] did, for tests and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GateStats {
    /// Entries in the allowed table.
    pub allowed_entries: usize,
    /// Entries in the refused table.
    pub refused_entries: usize,
}

/// The cache, rate limit and concurrency limit in front of an [`Authorizer`]; see the
/// [module docs](self). Cheap to clone (shared state).
#[derive(Clone, Debug)]
pub struct Gate {
    authorizer: Arc<dyn Authorizer>,
    config: GateConfig,
    in_flight: Arc<Semaphore>,
    cache: Arc<Mutex<Cache>>,
}

impl Gate {
    /// A gate around `authorizer` with `config`'s cache and limits.
    pub fn new(authorizer: Arc<dyn Authorizer>, config: GateConfig) -> Self {
        Self {
            authorizer,
            in_flight: Arc::new(Semaphore::new(config.max_in_flight)),
            cache: Arc::new(Mutex::new(Cache {
                allowed: Table::default(),
                refused: Table::default(),
                bucket: Bucket {
                    tokens: f64::from(config.review_burst),
                    last: Instant::now(),
                },
                seq: 0,
            })),
            config,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many entries the tables hold.
    pub fn stats(&self) -> GateStats {
        let cache = self.lock();
        GateStats {
            allowed_entries: cache.allowed.len(),
            refused_entries: cache.refused.len(),
        }
    }

    fn lookup(&self, key: &Key, now: Instant) -> Lookup {
        let cache = self.lock();
        if let Some(entry) = cache.allowed.get(key) {
            return if entry.expires > now {
                Lookup::Hit(entry.decision.clone())
            } else {
                Lookup::Renew
            };
        }
        match cache.refused.get(key) {
            Some(entry) if entry.expires > now => Lookup::Hit(entry.decision.clone()),
            _ => Lookup::Miss,
        }
    }

    /// Takes one review from the bucket, refilled at `reviews_per_second` up to
    /// `review_burst`; false when it is empty.
    fn take_review(&self, now: Instant) -> bool {
        let (rate, burst) = (
            f64::from(self.config.reviews_per_second),
            f64::from(self.config.review_burst),
        );
        let mut cache = self.lock();
        let bucket = &mut cache.bucket;
        let elapsed = now.saturating_duration_since(bucket.last).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate).min(burst);
        bucket.last = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    fn remember(&self, key: Key, decision: &Decision, now: Instant) {
        let config = &self.config;
        let ttl = match decision {
            Decision::Allowed { .. } => config.token_ttl.min(config.allowed_ttl),
            Decision::Forbidden { .. } => config.token_ttl.min(config.denied_ttl),
            Decision::Unauthenticated => config.token_ttl,
        };
        let mut cache = self.lock();
        cache.seq = cache.seq.wrapping_add(1);
        let entry = Entry {
            decision: decision.clone(),
            expires: now.checked_add(ttl).unwrap_or(now),
            seq: cache.seq,
        };
        let max = config.max_entries;
        if matches!(decision, Decision::Allowed { .. }) {
            cache.refused.remove(&key);
            cache.allowed.insert(key, entry, max);
        } else {
            cache.allowed.remove(&key);
            cache.refused.insert(key, entry, max);
        }
    }

    /// The decision for `token` to `verb` `path`: from the cache, or from the [`Authorizer`]
    /// within the rate and concurrency limits.
    ///
    /// # Errors
    ///
    /// [`Refusal::RateLimited`] or [`Refusal::Busy`] when a review was needed but not allowed
    /// now, [`Refusal::Failed`] when the reviews failed (not cached).
    pub async fn decide(&self, token: &str, verb: &str, path: &str) -> Result<Decision, Refusal> {
        let key = key(token, verb, path);
        let now = Instant::now();
        match self.lookup(&key, now) {
            Lookup::Hit(decision) => return Ok(decision),
            Lookup::Renew => {}
            Lookup::Miss => {
                if !self.take_review(now) {
                    return Err(Refusal::RateLimited);
                }
            }
        }
        let Ok(_permit) = self.in_flight.try_acquire() else {
            return Err(Refusal::Busy);
        };
        let decision = self.authorizer.authorize(token, verb, path).await?;
        self.remember(key, &decision, Instant::now());
        Ok(decision)
    }
}

/// `router`, answering only requests whose bearer token `authorizer` allows, with the default
/// [`GateConfig`].
pub fn protect(router: Router, authorizer: Arc<dyn Authorizer>) -> Router {
    protect_with(router, Gate::new(authorizer, GateConfig::default()))
}

/// `router`, answering only requests `gate` allows.
pub(crate) fn protect_with(router: Router, gate: Gate) -> Router {
    router.layer(middleware::from_fn_with_state(gate, check))
}

fn bearer(request: &Request) -> Option<&str> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

async fn check(State(gate): State<Gate>, request: Request, next: Next) -> Response {
    let Some(token) = bearer(&request) else {
        return refuse(StatusCode::UNAUTHORIZED, "Unauthorized\n".to_owned());
    };
    let verb = request.method().as_str().to_ascii_lowercase();
    let path = request.uri().path().to_owned();
    match gate.decide(token, &verb, &path).await {
        Ok(Decision::Allowed { .. }) => next.run(request).await,
        Ok(Decision::Unauthenticated) => {
            refuse(StatusCode::UNAUTHORIZED, "Unauthorized\n".to_owned())
        }
        Ok(Decision::Forbidden { user, reason }) => {
            tracing::debug!(%user, %verb, %path, %reason, "request forbidden");
            refuse(
                StatusCode::FORBIDDEN,
                format!("Authorization denied for user {user:?} to {verb} {path}\n"),
            )
        }
        Err(refusal @ (Refusal::RateLimited | Refusal::Busy)) => {
            refuse(StatusCode::TOO_MANY_REQUESTS, format!("{refusal}\n"))
        }
        Err(Refusal::Failed(error)) => {
            tracing::warn!(%error, %path, "request not authorized: the reviews failed");
            refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "cannot authorize the request right now; retry shortly\n".to_owned(),
            )
        }
    }
}

fn refuse(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

//! Outages on virtual time: the watches' and the identity's retry loops against an API server
//! that refuses connections, answers 503 or 429 for 20 s, then answers. The server is an
//! in-process kube `Client` service (no sockets, so tokio's paused clock can run the 20 s at
//! once); what it was asked, and when, is recorded, and the log is captured.
//!
//! Each test checks the three things an operator lives with: how often the API server is asked
//! (the documented backoff, whatever the error), how much the log says (one WARN, one
//! "recovered" line), and that every failure reads as the server's words, never Rust `Debug`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::UnsyncBoxBody};
use kube::runtime::watcher;
use tier_core::TierLister;
use tier_kube::backoff::RetryBackoff;
use tier_kube::crd::Tier;
use tier_kube::identity::{ControllerIdentity, IdentityState};
use tier_kube::lister::KubeLister;
use tier_kube::policies::{ClusterNetworkPolicies, PolicyCache};
use tokio::time::Instant;
use tracing_subscriber::layer::SubscriberExt;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Body = UnsyncBoxBody<Bytes, BoxError>;

/// How long the API server fails.
const OUTAGE: Duration = Duration::from_secs(20);

/// What the fake API server does with every request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Fails as a connection to a port nobody listens on.
    Refuse,
    /// 503 ServiceUnavailable.
    Unavailable,
    /// 429 TooManyRequests, `Retry-After: 3` (also in the Status's details).
    TooMany,
    /// Answers: empty lists, watches that stay open, a SelfSubjectReview naming a user.
    Answer,
}

/// One request the fake server got: when, and what (`GET /apis/...?watch=true...`).
#[derive(Clone, Debug)]
struct Asked {
    at: Instant,
    what: String,
}

/// An API server as a kube `Client` service.
#[derive(Clone)]
struct FakeApi {
    mode: Arc<Mutex<Mode>>,
    asked: Arc<Mutex<Vec<Asked>>>,
    /// Ends every open watch when notified.
    ends: Arc<tokio::sync::Notify>,
}

impl FakeApi {
    fn new(mode: Mode) -> Self {
        Self {
            mode: Arc::new(Mutex::new(mode)),
            asked: Arc::default(),
            ends: Arc::default(),
        }
    }

    fn client(&self) -> kube::Client {
        kube::Client::new(self.clone(), "default")
    }

    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    /// Ends the watches that are open (as a restarting API server does).
    fn end_watches(&self) {
        self.ends.notify_waiters();
    }

    /// The watches (not lists) of `resource`.
    fn watches(&self, resource: &str) -> Vec<Instant> {
        self.asked
            .lock()
            .unwrap()
            .iter()
            .filter(|a| a.what.contains(resource) && a.what.contains("watch=true"))
            .map(|a| a.at)
            .collect()
    }

    /// When requests whose method, path and query contain `pattern` were made.
    fn times(&self, pattern: &str) -> Vec<Instant> {
        self.asked
            .lock()
            .unwrap()
            .iter()
            .filter(|a| a.what.contains(pattern))
            .map(|a| a.at)
            .collect()
    }

    /// The lists of `resource` (not watches).
    fn lists(&self, resource: &str) -> Vec<Instant> {
        self.asked
            .lock()
            .unwrap()
            .iter()
            .filter(|a| a.what.contains(resource) && !a.what.contains("watch=true"))
            .map(|a| a.at)
            .collect()
    }
}

fn status(code: u16, reason: &str, message: &str, retry_after: Option<u32>) -> Response {
    let mut body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    });
    let mut response = http::Response::builder()
        .status(code)
        .header("content-type", "application/json");
    if let Some(seconds) = retry_after {
        body["details"] = serde_json::json!({"retryAfterSeconds": seconds});
        response = response.header("retry-after", seconds.to_string());
    }
    response.body(full(body.to_string())).unwrap()
}

fn full(text: String) -> Body {
    Full::new(Bytes::from(text))
        .map_err(|never| match never {})
        .boxed_unsync()
}

type Response = http::Response<Body>;

/// A body that sends nothing and ends when `ends` is notified: a watch that stays open and
/// quiet until the server drops it.
fn open_body(ends: Arc<tokio::sync::Notify>) -> Body {
    let open = futures::StreamExt::take_until(futures::stream::pending(), async move {
        ends.notified().await;
    });
    StreamBody::new(open).boxed_unsync()
}

impl tower_service::Service<http::Request<kube::client::Body>> for FakeApi {
    type Response = Response;
    type Error = BoxError;
    type Future = std::future::Ready<Result<Response, BoxError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<kube::client::Body>) -> Self::Future {
        let uri = request.uri();
        let what = format!(
            "{} {}?{}",
            request.method(),
            uri.path(),
            uri.query().unwrap_or_default()
        );
        let watch = what.contains("watch=true");
        self.asked.lock().unwrap().push(Asked {
            at: Instant::now(),
            what: what.clone(),
        });
        let answer = match *self.mode.lock().unwrap() {
            Mode::Refuse => Err(Box::new(std::io::Error::from(
                std::io::ErrorKind::ConnectionRefused,
            )) as BoxError),
            Mode::Unavailable => Ok(status(
                503,
                "ServiceUnavailable",
                "the server is currently unable to handle the request",
                None,
            )),
            Mode::TooMany => Ok(status(
                429,
                "TooManyRequests",
                "Too many requests, please try again later.",
                Some(3),
            )),
            Mode::Answer if what.contains("selfsubjectreviews") => {
                let review = serde_json::json!({
                    "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
                    "metadata": {}, "status": {"userInfo": {"username": "tierd"}},
                });
                Ok(http::Response::new(full(review.to_string())))
            }
            Mode::Answer if watch => {
                // A watch that stays open and quiet.
                Ok(http::Response::new(open_body(Arc::clone(&self.ends))))
            }
            Mode::Answer => {
                let list = serde_json::json!({
                    "apiVersion": "v1", "kind": "List",
                    "metadata": {"resourceVersion": "1"}, "items": [],
                });
                Ok(http::Response::new(full(list.to_string())))
            }
        };
        std::future::ready(answer)
    }
}

/// Log lines captured from every task of the test's (current-thread) runtime.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<(tracing::Level, String)>>>);

impl Logs {
    /// Captures the log until the guard is dropped.
    fn capture() -> (Self, tracing::subscriber::DefaultGuard) {
        let logs = Self::default();
        let subscriber = tracing_subscriber::registry().with(logs.clone());
        let guard = tracing::subscriber::set_default(subscriber);
        (logs, guard)
    }

    /// WARN and ERROR lines.
    fn loud(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(level, _)| *level <= tracing::Level::WARN)
            .map(|(_, m)| m.clone())
            .collect()
    }

    /// Lines at `level` containing `text`.
    fn matching(&self, level: tracing::Level, text: &str) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(l, m)| *l == level && m.contains(text))
            .map(|(_, m)| m.clone())
            .collect()
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Logs {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Message(String);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 = format!("{value:?}");
                } else {
                    self.0.push_str(&format!(" {}={value:?}", field.name()));
                }
            }
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        self.0
            .lock()
            .unwrap()
            .push((*event.metadata().level(), message.0));
    }
}

/// The waits between successive attempts.
fn gaps(times: &[Instant]) -> Vec<Duration> {
    times.windows(2).map(|w| w[1] - w[0]).collect()
}

/// Every gap is the backoff's: the n-th in `[d/2, d]`, `d = min(2 s, 200 ms * 2^(n-1))`, or at
/// least `floor` (a `Retry-After`).
fn assert_paced(gaps: &[Duration], floor: Duration) {
    for (n, gap) in gaps.iter().enumerate() {
        let d = RetryBackoff::STARTUP.nominal(n as u32 + 1);
        let (low, high) = ((d / 2).max(floor), d.max(floor));
        assert!(
            *gap >= low && *gap <= high,
            "wait {} was {gap:?}, not in [{low:?}, {high:?}]: {gaps:?}",
            n + 1
        );
    }
}

/// The Tier watch against a server failing with `mode` for 20 s: the attempts, the log, the
/// words, and the recovery.
async fn the_tier_watch_through(mode: Mode) {
    let (logs, _guard) = Logs::capture();
    let api = FakeApi::new(mode);
    let lister = KubeLister::<Tier>::watch_with_backoff(
        api.client(),
        (),
        watcher::Config::default(),
        RetryBackoff::default(),
    )
    .unwrap();
    tokio::time::sleep(OUTAGE).await;

    let lists = api.lists("/tiers");
    println!(
        "{mode:?} for {OUTAGE:?}: {} lists, waits {:?}",
        lists.len(),
        gaps(&lists)
    );
    let floor = match mode {
        Mode::TooMany => Duration::from_secs(3),
        _ => Duration::ZERO,
    };
    assert_paced(&gaps(&lists), floor);
    // Once grown, one attempt every 1 to 2 s: 13 to 23 in 20 s (it was 133 with every wait
    // the first one).
    let most = if floor.is_zero() { 23 } else { 7 };
    assert!(
        (6..=most).contains(&lists.len()),
        "{} lists in {OUTAGE:?}: {:?}",
        lists.len(),
        gaps(&lists)
    );

    // The words: the server's, never Rust Debug.
    let words = lister.watch_stats().last_error.unwrap();
    let expected = match mode {
        Mode::Refuse => "connection refused",
        Mode::Unavailable => "503 ServiceUnavailable: the server is currently unable",
        Mode::TooMany => "429 TooManyRequests: Too many requests",
        Mode::Answer => unreachable!(),
    };
    assert!(words.contains(expected), "{words}");
    assert!(
        !words.contains("Status {") && !words.contains("ApiError"),
        "{words}"
    );

    // One WARN for the whole outage, saying why in words.
    let loud = logs.loud();
    assert_eq!(loud.len(), 1, "{loud:#?}");
    assert!(
        loud[0].contains("Tier watch (tiers.crd.antrea.io) failing") && loud[0].contains(expected),
        "{loud:#?}"
    );

    // The server answers: synced within one capped wait, one line says so.
    api.set(Mode::Answer);
    let answered = Instant::now();
    tokio::time::timeout(Duration::from_secs(10), lister.wait_synced())
        .await
        .unwrap();
    assert!(
        answered.elapsed() <= RetryBackoff::STARTUP.cap.max(floor),
        "synced {:?} after the server answered",
        answered.elapsed()
    );
    let recovered = logs.matching(tracing::Level::INFO, "recovered after");
    assert_eq!(recovered.len(), 1, "{recovered:#?}");
    let failed = lists.len();
    assert!(
        recovered[0].contains(&format!("and {failed} failed attempts")),
        "{recovered:?} ({failed} lists failed)"
    );
    assert_eq!(logs.loud().len(), 1, "{:#?}", logs.loud());
}

#[tokio::test(start_paused = true)]
async fn refused_connections_for_20_s_follow_the_backoff_and_warn_once() {
    the_tier_watch_through(Mode::Refuse).await;
}

#[tokio::test(start_paused = true)]
async fn a_503_for_20_s_follows_the_backoff_and_warns_once() {
    the_tier_watch_through(Mode::Unavailable).await;
}

#[tokio::test(start_paused = true)]
async fn a_429_is_retried_no_sooner_than_its_retry_after() {
    the_tier_watch_through(Mode::TooMany).await;
}

#[tokio::test(start_paused = true)]
async fn a_long_outage_reminds_once_a_minute() {
    let (logs, _guard) = Logs::capture();
    let api = FakeApi::new(Mode::Refuse);
    let lister = KubeLister::<Tier>::watch_with_backoff(
        api.client(),
        (),
        watcher::Config::default(),
        RetryBackoff::default(),
    )
    .unwrap();
    tokio::time::sleep(Duration::from_secs(150)).await;
    let loud = logs.loud();
    // The first line, then a reminder after 60 s and 120 s (at the first failure past each).
    assert_eq!(loud.len(), 3, "{loud:#?}");
    assert!(loud[1].contains("still failing after 6"), "{loud:#?}");
    assert!(loud[2].contains("still failing after 12"), "{loud:#?}");
    drop(lister);
}

#[tokio::test(start_paused = true)]
async fn a_policy_watch_outage_is_paced_worded_and_warned_once() {
    let (logs, _guard) = Logs::capture();
    let api = FakeApi::new(Mode::Unavailable);
    let cache = PolicyCache::<ClusterNetworkPolicies>::start_with(
        api.client(),
        watcher::Config::default(),
        RetryBackoff::default(),
    )
    .unwrap();
    tokio::time::sleep(OUTAGE).await;
    let lists = api.lists("/clusternetworkpolicies");
    assert_paced(&gaps(&lists), Duration::ZERO);
    let reason = cache.describe().unwrap_err();
    assert!(
        reason.contains(
            "listing Antrea ClusterNetworkPolicies failed: 503 ServiceUnavailable: the server is \
             currently unable to handle the request"
        ),
        "{reason}"
    );
    assert!(
        !reason.contains("Status {") && !reason.contains("ApiError"),
        "{reason}"
    );
    let loud = logs.loud();
    assert_eq!(loud.len(), 1, "{loud:#?}");
    assert!(loud[0].contains("ClusterNetworkPolicy watch"), "{loud:#?}");

    api.set(Mode::Answer);
    tokio::time::timeout(RetryBackoff::STARTUP.cap, cache.wait_synced())
        .await
        .unwrap();
    assert_eq!(
        logs.matching(tracing::Level::INFO, "recovered after").len(),
        1
    );
}

#[tokio::test(start_paused = true)]
async fn the_identity_outage_is_worded_and_warned_once() {
    let (logs, _guard) = Logs::capture();
    let api = FakeApi::new(Mode::Unavailable);
    let identity = ControllerIdentity::discover(api.client(), Duration::from_secs(10)).unwrap();
    tokio::time::sleep(OUTAGE).await;
    let IdentityState::Pending {
        last_error: Some(error),
        ..
    } = identity.state()
    else {
        panic!("{:?}", identity.state());
    };
    assert!(
        error.contains("503 ServiceUnavailable: the server is currently unable"),
        "{error}"
    );
    assert!(
        !error.contains("Status {") && !error.contains("ApiError"),
        "{error}"
    );
    assert_paced(&gaps(&api.times("selfsubjectreviews")), Duration::ZERO);
    assert_eq!(logs.loud().len(), 1, "{:#?}", logs.loud());
    api.set(Mode::Answer);
    let user = tokio::time::timeout(RetryBackoff::STARTUP.cap, identity.wait())
        .await
        .unwrap();
    assert_eq!(user, "tierd");
    assert_eq!(
        logs.matching(tracing::Level::INFO, "recovered after").len(),
        1
    );
}

#[tokio::test(start_paused = true)]
async fn a_watch_resumed_after_an_outage_says_it_recovered_though_nothing_changed() {
    let (logs, _guard) = Logs::capture();
    let api = FakeApi::new(Mode::Answer);
    let lister = KubeLister::<Tier>::watch_with_backoff(
        api.client(),
        (),
        watcher::Config::default(),
        RetryBackoff::default(),
    )
    .unwrap();
    tokio::time::timeout(Duration::from_secs(1), lister.wait_synced())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(api.lists("/tiers").len(), 1);

    // The server goes away mid-run: its watch ends, every new one is answered 503.
    api.set(Mode::Unavailable);
    let outage = Instant::now();
    api.end_watches();
    tokio::time::sleep(OUTAGE).await;
    let watches: Vec<Instant> = api
        .watches("/tiers")
        .into_iter()
        .filter(|at| *at >= outage)
        .collect();
    assert_paced(&gaps(&watches), Duration::ZERO);
    assert!((10..=23).contains(&watches.len()), "{watches:?}");
    assert_eq!(api.lists("/tiers").len(), 1, "no relist: the watch resumes");
    assert_eq!(logs.loud().len(), 1, "{:#?}", logs.loud());
    assert!(
        logs.loud()[0].contains("starting the Tier watch failed: 503 ServiceUnavailable"),
        "{:#?}",
        logs.loud()
    );

    // Back: the watch starts again and yields nothing (nothing changed); the log still says
    // the outage ended, within one capped wait.
    api.set(Mode::Answer);
    let back = Instant::now();
    tokio::time::sleep(RetryBackoff::STARTUP.cap).await;
    let recovered = logs.matching(tracing::Level::INFO, "recovered after");
    assert_eq!(recovered.len(), 1, "{:#?}", logs.0.lock().unwrap());
    assert!(
        api.watches("/tiers").last().is_some_and(|at| *at >= back),
        "watched again"
    );
    assert_eq!(logs.loud().len(), 1, "{:#?}", logs.loud());
}

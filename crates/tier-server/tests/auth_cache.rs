//! `/metrics` authentication as controller-runtime caches it, on tokio's paused clock with a
//! counting fake authorizer: one review per token per minute, denials for seconds, a bounded
//! cache, cache hits without a permit, and a flood of bogus tokens that costs the API server a
//! bounded rate while the real scraper keeps getting 200.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::get;
use tier_server::auth::{self, AuthError, Authorizer, Decision, Gate, GateConfig, Refusal};
use tokio::sync::Semaphore;
use tower_service::Service;

/// Allows `scraper`, forbids `nosy`, authenticates nothing else; counts its calls per token.
/// While `hold` has no permits, every review waits for one.
#[derive(Debug)]
struct Counting {
    calls: Mutex<HashMap<String, usize>>,
    hold: Option<Arc<Semaphore>>,
}

impl Counting {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            calls: Mutex::default(),
            hold: None,
        })
    }

    fn held(hold: Arc<Semaphore>) -> Arc<Self> {
        Arc::new(Self {
            calls: Mutex::default(),
            hold: Some(hold),
        })
    }

    fn calls(&self, token: &str) -> usize {
        self.calls.lock().unwrap().get(token).copied().unwrap_or(0)
    }

    fn total(&self) -> usize {
        self.calls.lock().unwrap().values().sum()
    }
}

#[async_trait::async_trait]
impl Authorizer for Counting {
    async fn authorize(
        &self,
        token: &str,
        _verb: &str,
        _path: &str,
    ) -> Result<Decision, AuthError> {
        *self
            .calls
            .lock()
            .unwrap()
            .entry(token.to_owned())
            .or_default() += 1;
        if let Some(hold) = &self.hold {
            let _permit = hold.acquire().await.unwrap();
        }
        Ok(match token {
            "scraper" => Decision::Allowed {
                user: "prometheus".into(),
            },
            "nosy" => Decision::Forbidden {
                user: "nosy".into(),
                reason: "no RBAC".into(),
            },
            _ => Decision::Unauthenticated,
        })
    }
}

fn metrics_router() -> Router {
    Router::new().route("/metrics", get(|| async { "tierd_up 1\n" }))
}

async fn scrape(router: &Router, token: &str) -> StatusCode {
    let request = Request::get("/metrics")
        .header("authorization", format!("Bearer {token}"))
        .body(Body::empty())
        .unwrap();
    router.clone().call(request).await.unwrap().status()
}

const MINUTE: Duration = Duration::from_secs(60);

#[tokio::test(start_paused = true)]
async fn the_same_token_twice_costs_one_review() {
    let authorizer = Counting::new();
    let router = auth::protect(metrics_router(), authorizer.clone());
    assert_eq!(scrape(&router, "scraper").await, StatusCode::OK);
    tokio::time::advance(Duration::from_secs(15)).await;
    assert_eq!(scrape(&router, "scraper").await, StatusCode::OK);
    assert_eq!(
        authorizer.calls("scraper"),
        1,
        "the second scrape came from the cache"
    );
    // Refusals are cached too: a bogus token repeated is reviewed once.
    assert_eq!(scrape(&router, "bogus").await, StatusCode::UNAUTHORIZED);
    assert_eq!(scrape(&router, "bogus").await, StatusCode::UNAUTHORIZED);
    assert_eq!(authorizer.calls("bogus"), 1);
}

#[tokio::test(start_paused = true)]
async fn an_allowed_token_is_reviewed_again_after_a_minute() {
    let authorizer = Counting::new();
    let router = auth::protect(metrics_router(), authorizer.clone());
    assert_eq!(scrape(&router, "scraper").await, StatusCode::OK);
    tokio::time::advance(MINUTE - Duration::from_secs(1)).await;
    assert_eq!(scrape(&router, "scraper").await, StatusCode::OK);
    assert_eq!(authorizer.calls("scraper"), 1, "still cached at 59 s");
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(scrape(&router, "scraper").await, StatusCode::OK);
    assert_eq!(
        authorizer.calls("scraper"),
        2,
        "the TokenReview is redone after a minute"
    );
    // An unauthenticated token is trusted as long: one minute.
    assert_eq!(scrape(&router, "bogus").await, StatusCode::UNAUTHORIZED);
    tokio::time::advance(MINUTE - Duration::from_secs(1)).await;
    assert_eq!(scrape(&router, "bogus").await, StatusCode::UNAUTHORIZED);
    assert_eq!(authorizer.calls("bogus"), 1);
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(scrape(&router, "bogus").await, StatusCode::UNAUTHORIZED);
    assert_eq!(authorizer.calls("bogus"), 2);
}

#[tokio::test(start_paused = true)]
async fn a_denial_is_cached_for_seconds_only() {
    let authorizer = Counting::new();
    let router = auth::protect(metrics_router(), authorizer.clone());
    assert_eq!(scrape(&router, "nosy").await, StatusCode::FORBIDDEN);
    tokio::time::advance(Duration::from_secs(29)).await;
    assert_eq!(scrape(&router, "nosy").await, StatusCode::FORBIDDEN);
    assert_eq!(authorizer.calls("nosy"), 1, "cached within 30 s");
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(scrape(&router, "nosy").await, StatusCode::FORBIDDEN);
    assert_eq!(
        authorizer.calls("nosy"),
        2,
        "a newly granted role is seen within 30 s"
    );
}

#[tokio::test(start_paused = true)]
async fn a_flood_of_bogus_tokens_costs_a_bounded_rate_and_the_scraper_keeps_its_200() {
    let authorizer = Counting::new();
    let config = GateConfig::default();
    let router = auth::protect(metrics_router(), authorizer.clone());
    assert_eq!(scrape(&router, "scraper").await, StatusCode::OK);
    // Three minutes of 16 distinct bogus tokens every 10 ms (1,600/s), the scraper scraping
    // every 15 s throughout, across three expiries of its cache entry.
    let (mut flood, mut refused_by_limit, mut scrapes) = (0_usize, 0_usize, 0_usize);
    let step = Duration::from_millis(10);
    let rounds = 3 * 60 * 100;
    for round in 0..rounds {
        for connection in 0..16 {
            let status = scrape(&router, &format!("bogus-{round}-{connection}")).await;
            flood += 1;
            match status {
                StatusCode::TOO_MANY_REQUESTS => refused_by_limit += 1,
                StatusCode::UNAUTHORIZED => {}
                other => panic!("a bogus token got {other}"),
            }
        }
        if round % 1500 == 0 {
            scrapes += 1;
            assert_eq!(
                scrape(&router, "scraper").await,
                StatusCode::OK,
                "the real scraper is refused at round {round}"
            );
        }
        tokio::time::advance(step).await;
    }
    let seconds = 180.0;
    let bogus_reviews = authorizer.total() - authorizer.calls("scraper");
    let bound = f64::from(config.review_burst) + seconds * f64::from(config.reviews_per_second);
    assert!(
        (bogus_reviews as f64) <= bound + 1.0,
        "{bogus_reviews} reviews for {flood} bogus requests; at most {bound}"
    );
    assert!(
        refused_by_limit > flood * 9 / 10,
        "{refused_by_limit} of {flood}"
    );
    assert_eq!(scrapes, 12);
    eprintln!(
        "{flood} bogus requests in {seconds} s: {bogus_reviews} reviews (bound {bound}), \
         {refused_by_limit} answered 429 without a review; the scraper: {scrapes} scrapes, \
         {} reviews",
        authorizer.calls("scraper")
    );
    assert!(
        authorizer.calls("scraper") <= 4,
        "one review per expiry: {}",
        authorizer.calls("scraper")
    );
}

#[tokio::test(start_paused = true)]
async fn the_cache_is_bounded_and_bogus_tokens_cannot_push_out_an_allowed_one() {
    let authorizer = Counting::new();
    let config = GateConfig {
        max_entries: 32,
        reviews_per_second: 1_000,
        review_burst: 1_000,
        ..GateConfig::default()
    };
    let gate = Gate::new(authorizer.clone(), config);
    assert!(matches!(
        gate.decide("scraper", "get", "/metrics").await,
        Ok(Decision::Allowed { .. })
    ));
    for i in 0..500 {
        gate.decide(&format!("bogus-{i}"), "get", "/metrics")
            .await
            .unwrap();
    }
    let stats = gate.stats();
    assert_eq!(stats.refused_entries, 32, "{stats:?}");
    assert_eq!(stats.allowed_entries, 1, "{stats:?}");
    // The newest bogus tokens are cached, the oldest were dropped.
    gate.decide("bogus-499", "get", "/metrics").await.unwrap();
    assert_eq!(authorizer.calls("bogus-499"), 1);
    gate.decide("bogus-0", "get", "/metrics").await.unwrap();
    assert_eq!(authorizer.calls("bogus-0"), 2);
    // The scraper is still a cache hit.
    gate.decide("scraper", "get", "/metrics").await.unwrap();
    assert_eq!(authorizer.calls("scraper"), 1);
}

#[tokio::test(start_paused = true)]
async fn cache_hits_take_no_permit_and_uncached_reviews_are_rate_limited() {
    let hold = Arc::new(Semaphore::new(1));
    let authorizer = Counting::held(hold.clone());
    let config = GateConfig {
        max_in_flight: 1,
        reviews_per_second: 1,
        review_burst: 2,
        ..GateConfig::default()
    };
    let gate = Gate::new(authorizer.clone(), config);
    gate.decide("scraper", "get", "/metrics").await.unwrap();
    // A slow review holds the only permit...
    let held = hold.acquire_owned().await.unwrap();
    let slow = tokio::spawn({
        let gate = gate.clone();
        async move { gate.decide("slow", "get", "/metrics").await }
    });
    tokio::task::yield_now().await;
    assert_eq!(authorizer.calls("slow"), 1);
    // ...yet the cached scraper is answered, and another new token is refused (busy).
    assert!(matches!(
        gate.decide("scraper", "get", "/metrics").await,
        Ok(Decision::Allowed { .. })
    ));
    assert!(matches!(
        gate.decide("other", "get", "/metrics").await,
        Err(Refusal::RateLimited | Refusal::Busy)
    ));
    drop(held);
    slow.await.unwrap().unwrap();
    // The bucket (burst 2) is spent: the next new token waits a second.
    assert!(matches!(
        gate.decide("later", "get", "/metrics").await,
        Err(Refusal::RateLimited)
    ));
    tokio::time::advance(Duration::from_secs(1)).await;
    gate.decide("later", "get", "/metrics").await.unwrap();
    assert_eq!(authorizer.calls("later"), 1);
}

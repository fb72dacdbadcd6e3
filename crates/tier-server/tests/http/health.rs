//! /livez, /readyz and the readiness gate.

use std::time::{Duration, Instant};

use axum::Router;
use axum::http::StatusCode;
use axum::routing;
use std::sync::Arc;

use tier_core::{FixedLister, Snapshot, Status, TierState};
use tier_server::health::HealthConfig;
use tier_server::readiness::{self, CacheSynced, CheckState, TIER_CACHE_SYNCED};
use tier_server::readiness::{Readiness, Shutdown};
use tier_server::server::Routes;
use tokio::sync::watch;

use crate::common::{Running, get, tier_status};

struct Fixture {
    status: watch::Sender<Status>,
    cache: Arc<FixedLister>,
    shutdown: Shutdown,
    readiness: Readiness,
}

impl Fixture {
    /// Publishes `status`, the Tier cache synced exactly when the status says so.
    fn send(&self, status: Status) {
        if status.synced {
            self.cache.set(Snapshot::synced(1, []));
        }
        self.status.send_replace(status);
    }
}

fn fixture() -> Fixture {
    let (status, rx) = watch::channel(Status::default());
    let cache = Arc::new(FixedLister::default());
    let shutdown = Shutdown::new();
    let readiness = Readiness::standard(rx, CacheSynced::new(cache.clone()), &shutdown);
    Fixture {
        status,
        cache,
        shutdown,
        readiness,
    }
}

/// The informational `system-tiers` line of `/readyz?verbose` for [`synced`].
const TIERS_WAITING: &str = "[-]system-tiers failed (informational): system Tiers not \
                             initialized: baseline blocked: priority 253 is held by Tier mine; \
                             application pending\n";

/// The informational `tiers-unobstructed` line for [`synced`]: what stands in a Tier's way.
const TIERS_OBSTRUCTED: &str = "[-]tiers-unobstructed failed (informational): 1 of 3 desired \
                                Tiers cannot be kept as desired: baseline blocked: priority 253 \
                                is held by Tier mine\n";

/// The same before the first list: `system-tiers` waits, nothing is in a Tier's way.
const TIERS_UNSYNCED: &str = "[-]system-tiers failed (informational): the Tier cache has not \
                              completed its first list\n\
                              [+]tiers-unobstructed ok (informational)\n";

fn synced() -> Status {
    Status {
        synced: true,
        tiers: vec![
            tier_status(
                "baseline",
                TierState::Blocked {
                    since: Instant::now(),
                    blockers: vec!["mine".into()],
                    reason: "priority 253 is held by Tier mine".into(),
                },
            ),
            tier_status("application", TierState::Pending),
            tier_status("platform", TierState::Converged),
        ],
        ..Status::default()
    }
}

#[tokio::test]
async fn readyz_passes_plain_and_verbose() {
    let f = fixture();
    f.send(synced());
    let server = Running::plain(Routes::new(f.readiness.clone()).into_router()).await;

    let reply = get(server.addr, "/readyz").await;
    assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "ok"));
    assert_eq!(reply.headers["content-type"], "text/plain; charset=utf-8");

    let reply = get(server.addr, "/readyz?verbose").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        reply.body,
        format!(
            "[+]tier-cache-synced ok\n[+]shutdown ok\n{TIERS_WAITING}{TIERS_OBSTRUCTED}readyz \
             check passed\n"
        )
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn readyz_failure_lists_every_check_with_its_reason() {
    let f = fixture();
    let server = Running::plain(Routes::new(f.readiness.clone()).into_router()).await;
    let expected = format!(
        "[-]tier-cache-synced failed: the Tier cache has not completed its first list\n\
         [+]shutdown ok\n\
         {TIERS_UNSYNCED}\
         readyz check failed\n"
    );
    for path in ["/readyz", "/readyz?verbose"] {
        let reply = get(server.addr, path).await;
        assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{path}");
        assert_eq!(reply.body, expected, "{path}");
    }
    server.stop().await.unwrap();
}

#[tokio::test]
async fn readyz_exclude_leaves_checks_out() {
    let f = fixture();
    let server = Running::plain(Routes::new(f.readiness.clone()).into_router()).await;

    let reply = get(server.addr, "/readyz?exclude=tier-cache-synced").await;
    assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "ok"));

    let reply = get(
        server.addr,
        "/readyz?verbose&exclude=tier-cache-synced&exclude=nope&exclude=other",
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        reply.body,
        format!(
            "[+]tier-cache-synced excluded: ok\n\
         [+]shutdown ok\n\
         {TIERS_UNSYNCED}\
         warn: some readyz checks cannot be excluded: no matches for \"nope\",\"other\"\n\
         readyz check passed\n"
        )
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn readyz_single_check_includes_checks_outside_the_set() {
    let f = fixture();
    f.send(synced());
    let server = Running::plain(Routes::new(f.readiness.clone()).into_router()).await;

    // system-tiers does not decide /readyz by default (it is informational) ...
    let reply = get(server.addr, "/readyz").await;
    assert_eq!(reply.status, StatusCode::OK);
    let reply = get(server.addr, "/readyz?verbose").await;
    assert!(reply.body.contains(TIERS_WAITING), "{}", reply.body);
    // ... but it can be asked for by name, and names every Tier that is not converged.
    let reply = get(server.addr, "/readyz/system-tiers").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        reply.body,
        "[-]system-tiers failed: system Tiers not initialized: baseline blocked: priority 253 \
         is held by Tier mine; application pending\n\
         readyz check failed\n"
    );

    let reply = get(server.addr, "/readyz/shutdown").await;
    assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "ok"));
    let reply = get(server.addr, "/readyz/shutdown?verbose").await;
    assert_eq!(reply.body, "[+]shutdown ok\nreadyz check passed\n");

    let reply = get(server.addr, "/readyz/nope").await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert_eq!(
        reply.body,
        "readyz check \"nope\" is not registered; GET /readyz?verbose lists the checks\n"
    );

    // Initialized is latched: a later drift does not fail the check.
    let mut status = synced();
    status.initialized = true;
    f.send(status);
    let reply = get(server.addr, "/readyz/system-tiers").await;
    assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "ok"));
    server.stop().await.unwrap();
}

#[tokio::test]
async fn after_initialization_readyz_verbose_still_names_a_denied_tier_and_stays_ready() {
    let f = fixture();
    let mut status = synced();
    status.initialized = true;
    status.tiers[0].state = TierState::Denied {
        since: Instant::now(),
        attempt: 4,
        message: "update to Tier priority is not allowed".into(),
        rule: None,
    };
    f.send(status);
    let server = Running::plain(Routes::new(f.readiness.clone()).into_router()).await;
    // Ready: the webhook stays in its Service.
    let reply = get(server.addr, "/readyz").await;
    assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "ok"));
    let reply = get(server.addr, "/readyz?verbose").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(
        reply.body.contains(
            "[+]system-tiers ok (informational)\n\
             [-]tiers-unobstructed failed (informational): 1 of 3 desired Tiers cannot be kept \
             as desired: baseline denied"
        ),
        "{}",
        reply.body
    );
    assert!(
        reply
            .body
            .contains("update to Tier priority is not allowed"),
        "{}",
        reply.body
    );
    let reply = get(server.addr, "/readyz/tiers-unobstructed").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    // Once nothing is in the way, the line passes.
    let mut status = synced();
    status.initialized = true;
    status.tiers[0].state = TierState::Converged;
    f.send(status);
    let reply = get(server.addr, "/readyz?verbose").await;
    assert!(
        reply
            .body
            .contains("[+]tiers-unobstructed ok (informational)\n"),
        "{}",
        reply.body
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_registered_check_joins_readyz_in_one_step() {
    let f = fixture();
    f.send(synced());
    let server = Running::plain(Routes::new(f.readiness.clone()).into_router()).await;
    assert_eq!(get(server.addr, "/readyz").await.status, StatusCode::OK);

    // An embedder's own check: registering it is all it takes.
    let (mine, rx) = watch::channel(CheckState::failed("my cache is cold"));
    f.readiness.register("my-cache", rx);
    let reply = get(server.addr, "/readyz").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        reply
            .body
            .contains("[-]my-cache failed: my cache is cold\n"),
        "{}",
        reply.body
    );
    mine.send_replace(CheckState::Ok);
    assert_eq!(get(server.addr, "/readyz").await.status, StatusCode::OK);

    // An informational one is listed but never fails /readyz.
    f.readiness.register_informational(
        "my-hint",
        readiness::from_fn(|| CheckState::failed("warming")),
    );
    let reply = get(server.addr, "/readyz?verbose").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(
        reply
            .body
            .contains("[-]my-hint failed (informational): warming\n"),
        "{}",
        reply.body
    );
    assert_eq!(
        get(server.addr, "/readyz/my-hint").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );

    // `tierd run --ready-requires-tiers`: system-tiers registered as required.
    f.readiness.register(
        readiness::SYSTEM_TIERS,
        readiness::SystemTiers(f.status.subscribe()),
    );
    let reply = get(server.addr, "/readyz").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        reply
            .body
            .contains("[-]system-tiers failed: system Tiers not initialized"),
        "{}",
        reply.body
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn shutdown_fails_readiness_at_once_but_not_liveness() {
    let f = fixture();
    f.send(synced());
    let server = Running::plain(Routes::new(f.readiness.clone()).into_router()).await;
    assert_eq!(get(server.addr, "/readyz").await.status, StatusCode::OK);

    f.shutdown.trigger();
    let reply = get(server.addr, "/readyz").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        reply.body,
        format!(
            "[+]tier-cache-synced ok\n[-]shutdown failed: shutting down\n{TIERS_WAITING}\
             {TIERS_OBSTRUCTED}readyz check failed\n"
        )
    );
    let reply = get(server.addr, "/livez").await;
    assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "ok"));
    let reply = get(server.addr, "/livez?verbose").await;
    assert_eq!(reply.body, "livez check passed\n");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn livez_can_include_checks() {
    let readiness = Readiness::new();
    let (tx, rx) = watch::channel(CheckState::Ok);
    readiness.register("deadlock", rx);
    let config = HealthConfig {
        livez: vec!["deadlock".into()],
    };
    let server = Running::plain(Routes::new(readiness).health(config).into_router()).await;
    assert_eq!(get(server.addr, "/livez").await.body, "ok");
    tx.send_replace(CheckState::failed("the driver loop is stuck"));
    let reply = get(server.addr, "/livez").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        reply.body,
        "[-]deadlock failed: the driver loop is stuck\nlivez check failed\n"
    );
    let reply = get(server.addr, "/livez/deadlock").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn gated_route_answers_503_until_its_check_passes() {
    let f = fixture();
    let gated = Router::new()
        .route("/tiers", routing::get(|| async { "six tiers" }))
        .route_layer(f.readiness.require(&[TIER_CACHE_SYNCED]));
    let router = Routes::new(f.readiness.clone()).into_router().merge(gated);
    let server = Running::plain(router).await;

    let reply = get(server.addr, "/tiers").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(reply.headers["retry-after"], "1");
    assert_eq!(
        reply.body,
        "service unavailable until these checks pass; retry shortly\n\
         [-]tier-cache-synced failed: the Tier cache has not completed its first list\n"
    );
    // Health is not gated.
    assert_eq!(get(server.addr, "/livez").await.status, StatusCode::OK);

    f.send(synced());
    let reply = get(server.addr, "/tiers").await;
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (StatusCode::OK, "six tiers")
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn gate_on_an_unregistered_check_stays_closed() {
    let readiness = Readiness::new();
    let gated = Router::new()
        .route("/x", routing::get(|| async { "x" }))
        .route_layer(readiness.require(&["typo"]));
    let server = Running::plain(gated).await;
    let reply = get(server.addr, "/x").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        reply
            .body
            .contains("[-]typo failed: no check of this name is registered"),
        "{}",
        reply.body
    );
    readiness.register("typo", readiness::from_fn(|| CheckState::Ok));
    assert_eq!(get(server.addr, "/x").await.status, StatusCode::OK);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn graceful_shutdown_after_the_drain_delay() {
    let f = fixture();
    let listener = tier_server::server::bind(([127, 0, 0, 1], 0).into())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let router = Routes::new(f.readiness.clone()).into_router();
    let serving = tokio::spawn(
        tier_server::server::Server::new(router)
            .serve(listener, f.shutdown.drained(Duration::from_millis(50))),
    );
    assert_eq!(get(addr, "/livez").await.status, StatusCode::OK);
    f.shutdown.trigger();
    // Still serving during the drain delay, and not ready.
    assert_eq!(
        get(addr, "/readyz/shutdown").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    tokio::time::timeout(Duration::from_secs(5), serving)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn policy_cache_checks_are_listed_but_never_fail_readyz() {
    let f = fixture();
    f.send(synced());
    let (acnp, acnp_rx) = watch::channel(CheckState::failed("listing: 403 Forbidden"));
    f.readiness
        .register_informational(readiness::ACNP_CACHE_SYNCED, acnp_rx)
        .register_informational(
            readiness::ANNP_CACHE_SYNCED,
            readiness::from_fn(|| CheckState::Ok),
        );
    let server = Running::plain(Routes::new(f.readiness.clone()).into_router()).await;
    // Tier creates must not wait for the policy caches: /readyz stays 200.
    let reply = get(server.addr, "/readyz").await;
    assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "ok"));
    let reply = get(server.addr, "/readyz?verbose").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        reply.body,
        format!(
            "[+]tier-cache-synced ok\n[+]shutdown ok\n{TIERS_WAITING}{TIERS_OBSTRUCTED}\
         [-]acnp-cache-synced failed (informational): listing: 403 Forbidden\n\
         [+]annp-cache-synced ok (informational)\nreadyz check passed\n"
        )
    );
    // Each is still its own check.
    assert_eq!(
        get(server.addr, "/readyz/acnp-cache-synced").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    acnp.send_replace(CheckState::Ok);
    assert_eq!(
        get(server.addr, "/readyz/acnp-cache-synced").await.status,
        StatusCode::OK
    );
    server.stop().await.unwrap();
}

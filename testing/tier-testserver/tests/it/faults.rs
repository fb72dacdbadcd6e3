//! Fault injection: every fault kind, name matching, budgets, and the log's fault marks.

use std::time::{Duration, Instant};

use http::Method;
use tier_testserver::tier::tier;
use tier_testserver::{Fault, FaultKind, ServerConfig, Verb};

use crate::common::{Http, TIERS, server};

#[tokio::test]
async fn status_faults_answer_with_retry_after_and_match_names() {
    let server = server(ServerConfig::default()).await;
    let http = Http::admin(&server);
    server.inject(Fault::too_many_requests(Verb::Create, 2).named("baseline"));
    assert_eq!(http.post(TIERS, &tier("other", 1, None)).await.code, 201);
    let reply = http.post(TIERS, &tier("baseline", 253, None)).await;
    assert_eq!(reply.code, 429);
    assert_eq!(reply.body["reason"], "TooManyRequests");
    assert_eq!(reply.body["details"]["retryAfterSeconds"], 2);
    assert_eq!(reply.headers["retry-after"], "2");
    assert!(server.store().get("baseline").is_none());
    assert_eq!(
        http.post(TIERS, &tier("baseline", 253, None)).await.code,
        201
    );
    let log = server.requests();
    let faulted = log.matching(Verb::Create, Some("baseline"));
    assert_eq!(faulted[0].fault, Some(FaultKind::Status));
    assert_eq!(faulted[0].code, Some(429));
    assert_eq!(faulted[1].fault, None);
    assert_eq!(server.active_faults(), 0);
}

#[tokio::test]
async fn forever_faults_fire_until_removed() {
    let server = server(ServerConfig::default()).await;
    let http = Http::admin(&server);
    let id = server.inject(Fault::unavailable(Verb::List).forever());
    for _ in 0..3 {
        let reply = http.get(TIERS).await;
        assert_eq!(reply.code, 503);
        assert_eq!(reply.body["reason"], "ServiceUnavailable");
    }
    assert!(server.remove_fault(id));
    assert_eq!(http.get(TIERS).await.code, 200);
    server.inject(Fault::status(Verb::Get, 500, "InternalError", "etcd is sad").times(2));
    assert_eq!(http.get(&format!("{TIERS}/x")).await.code, 500);
    server.clear_faults();
    assert_eq!(http.get(&format!("{TIERS}/x")).await.code, 404);
}

#[tokio::test]
async fn lost_responses_still_apply_the_write() {
    let server = server(ServerConfig::default()).await;
    let http = Http::admin(&server);
    server.inject(Fault::lose_response(Verb::Create));
    let reply = http.post(TIERS, &tier("baseline", 253, None)).await;
    assert_eq!(reply.code, 504);
    assert_eq!(reply.body["reason"], "Timeout");
    assert!(server.store().get("baseline").is_some());
    let retry = http.post(TIERS, &tier("baseline", 253, None)).await;
    assert_eq!(retry.body["reason"], "AlreadyExists");

    server.inject(Fault::lose_response_drop(Verb::Delete).named("baseline"));
    let dropped = http
        .try_send(Method::DELETE, &format!("{TIERS}/baseline"), None, None)
        .await;
    assert!(dropped.is_err(), "{dropped:?}");
    assert!(server.store().get("baseline").is_none());
    let log = server.requests();
    let record = log.matching(Verb::Delete, Some("baseline"))[0];
    assert_eq!(record.code, None);
    assert_eq!(record.fault, Some(FaultKind::LoseResponseDrop));
}

#[tokio::test]
async fn dropped_connections_apply_nothing() {
    let server = server(ServerConfig::default()).await;
    let http = Http::admin(&server);
    server.inject(Fault::drop_connection(Verb::Create));
    let reply = http
        .try_send(
            Method::POST,
            TIERS,
            Some("application/json"),
            Some(tier("a", 1, None).to_string()),
        )
        .await;
    assert!(reply.is_err(), "{reply:?}");
    assert!(server.store().get("a").is_none());
    assert_eq!(
        server.requests().matching(Verb::Create, Some("a"))[0].fault,
        Some(FaultKind::Drop)
    );
    assert_eq!(http.post(TIERS, &tier("a", 1, None)).await.code, 201);
}

#[tokio::test]
async fn delays_postpone_and_hangs_never_answer() {
    let server = server(ServerConfig::default()).await;
    let http = Http::admin(&server);
    server.inject(Fault::delay(Verb::List, Duration::from_millis(200)));
    let started = Instant::now();
    assert_eq!(http.get(TIERS).await.code, 200);
    assert!(started.elapsed() >= Duration::from_millis(200));

    server.inject(Fault::hang(Verb::Get).named("stuck"));
    let hung = tokio::time::timeout(
        Duration::from_millis(300),
        http.get(&format!("{TIERS}/stuck")),
    )
    .await;
    assert!(hung.is_err(), "a hung request must not be answered");
    let log = server.requests();
    let record = log.matching(Verb::Get, Some("stuck"))[0];
    assert_eq!((record.code, record.fault), (None, Some(FaultKind::Hang)));
    assert_eq!(http.get(&format!("{TIERS}/stuck")).await.code, 404);
}

#[tokio::test]
async fn watch_faults_fail_the_watch_request() {
    let server = server(ServerConfig::default()).await;
    let http = Http::admin(&server);
    server.inject(Fault::status(
        Verb::Watch,
        500,
        "InternalError",
        "no watch for you",
    ));
    let reply = http.get(&format!("{TIERS}?watch=true")).await;
    assert_eq!(reply.code, 500);
    assert_eq!(reply.body["message"], "no watch for you");
    assert_eq!(server.requests().count(Verb::Watch, None), 1);
}

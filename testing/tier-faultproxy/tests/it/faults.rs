//! Request faults as the kube client sees them: statuses with Retry-After, hangs, resets, a
//! response lost after the write was applied; and what passes through untouched.

use std::io::ErrorKind;

use kube::api::PostParams;
use tier_faultproxy::{Fault, FaultKind, Limits, Matcher, Verb};

use crate::common::{
    ADMIN, PATIENCE, TIERS, admin, api_error, client, io_kinds, proxy, proxy_with, server, tier,
    tiers,
};

#[tokio::test]
async fn status_faults_reach_kube_as_api_errors_without_reaching_the_server() {
    let server = server().await;
    let proxy = proxy(&server).await;
    let api = tiers(admin(&proxy).await);
    let cases = [
        (
            Fault::too_many_requests(Verb::Get, 7),
            429,
            "TooManyRequests",
        ),
        (Fault::internal_error(Verb::Get), 500, "InternalError"),
        (Fault::unavailable(Verb::Get), 503, "ServiceUnavailable"),
        (Fault::timeout(Verb::Get), 504, "Timeout"),
    ];
    for (fault, code, reason) in cases {
        proxy.inject(fault.on(TIERS).named("x")).unwrap();
        let (got_code, got_reason, _) = api_error(api.get("x").await.unwrap_err());
        assert_eq!((got_code, got_reason.as_str()), (code, reason));
    }
    // Each fired once: the next get is forwarded (and the server says the Tier is absent).
    let (code, reason, _) = api_error(api.get("x").await.unwrap_err());
    assert_eq!((code, reason.as_str()), (404, "NotFound"));
    assert_eq!(
        server
            .requests()
            .count(tier_testserver::Verb::Get, Some("x")),
        1
    );
    let log = proxy.requests();
    let gets = Matcher::verb(Verb::Get).on(TIERS).named("x");
    assert_eq!(log.count(gets.clone()), 5);
    assert_eq!(
        log.count_where(|r| r.fault == Some(FaultKind::Status) && r.upstream_code.is_none()),
        4
    );
    assert_eq!(log.count_code(gets, 404), 1);
}

#[tokio::test]
async fn retry_after_is_sent_as_a_header_and_in_the_status_details() {
    let server = server().await;
    let proxy = proxy(&server).await;
    let client = admin(&proxy).await;
    proxy
        .inject(Fault::too_many_requests(Verb::List, 7).on(TIERS))
        .unwrap();
    let request = http::Request::get("/apis/crd.antrea.io/v1beta1/tiers")
        .body(Vec::new())
        .unwrap();
    let response = client
        .send(request.map(kube::client::Body::from))
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "7");
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    let status: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["details"]["retryAfterSeconds"], 7);
}

#[tokio::test]
async fn kubes_own_retries_ride_out_a_burst_of_503s() {
    let server = server().await;
    let proxy = proxy(&server).await;
    let api = tiers(client(&proxy, crate::common::ADMIN_TOKEN, true).await);
    proxy
        .inject(Fault::unavailable(Verb::Create).on(TIERS).times(2))
        .unwrap();
    api.create(&PostParams::default(), &tier("retried", 10))
        .await
        .unwrap();
    let creates = Matcher::verb(Verb::Create).named("retried");
    assert_eq!(proxy.requests().count_code(creates.clone(), 503), 2);
    assert_eq!(proxy.requests().count_code(creates, 201), 1);
}

#[tokio::test]
async fn a_hang_holds_the_request_until_released_then_forwards_it() {
    let server = server().await;
    let proxy = proxy(&server).await;
    let api = tiers(admin(&proxy).await);
    api.create(&PostParams::default(), &tier("a", 10))
        .await
        .unwrap();
    let hang = proxy
        .inject(Fault::hang(Verb::Get).on(TIERS).named("a"))
        .unwrap();
    let pending = tokio::spawn({
        let api = api.clone();
        async move { api.get("a").await }
    });
    assert!(proxy.wait_for_held(1, PATIENCE).await);
    // Held, not forwarded, not answered.
    assert_eq!(
        server
            .requests()
            .count(tier_testserver::Verb::Get, Some("a")),
        0
    );
    assert!(!pending.is_finished());
    assert_eq!(proxy.requests().count(Verb::Get), 0);
    assert_eq!(proxy.release(hang), 1);
    let got = tokio::time::timeout(PATIENCE, pending)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(got.metadata.name.as_deref(), Some("a"));
    assert_eq!(
        server
            .requests()
            .count(tier_testserver::Verb::Get, Some("a")),
        1
    );
    let log = proxy.requests();
    let record = log.matching(Verb::Get)[0];
    assert_eq!(
        (record.fault, record.code),
        (Some(FaultKind::Hang), Some(200))
    );
    assert_eq!(proxy.held(), 0);
}

#[tokio::test]
async fn a_hung_request_the_client_gives_up_on_never_reaches_the_server() {
    let server = server().await;
    let proxy = proxy(&server).await;
    let api = tiers(admin(&proxy).await);
    proxy.inject(Fault::hang(Verb::List).forever()).unwrap();
    // kube has no read timeout of its own: a hung request needs the caller's.
    let gave_up = tokio::time::timeout(
        std::time::Duration::from_millis(200),
        api.list(&Default::default()),
    )
    .await;
    assert!(gave_up.is_err());
    // The connection closes with the abandoned request; the hold goes with it.
    assert!(
        proxy
            .wait_for_requests(|log| log.count(Verb::List) == 1, PATIENCE)
            .await
    );
    let log = proxy.requests();
    let record = log.matching(Verb::List)[0];
    assert_eq!((record.code, record.upstream_code), (None, None));
    assert_eq!(proxy.held(), 0);
    assert_eq!(proxy.release_all(), 0);
    assert_eq!(
        server.requests().count(tier_testserver::Verb::List, None),
        0
    );
}

#[tokio::test]
async fn held_requests_are_bounded_and_the_next_one_is_told_why() {
    let server = server().await;
    let limits = Limits {
        max_held: 1,
        ..Limits::default()
    };
    let proxy = proxy_with(&server, limits).await;
    let api = tiers(admin(&proxy).await);
    proxy.inject(Fault::hang(Verb::Get).forever()).unwrap();
    let first = tokio::spawn({
        let api = api.clone();
        async move { api.get("one").await }
    });
    assert!(proxy.wait_for_held(1, PATIENCE).await);
    let (code, _, message) = api_error(api.get("two").await.unwrap_err());
    assert_eq!(code, 503);
    assert!(message.contains("Limits::max_held"), "{message}");
    proxy.clear_faults();
    assert_eq!(proxy.release_all(), 1);
    let (code, ..) = api_error(first.await.unwrap().unwrap_err());
    assert_eq!(code, 404);
}

#[tokio::test]
async fn a_reset_is_a_connection_reset_and_nothing_reaches_the_server() {
    let server = server().await;
    let proxy = proxy(&server).await;
    let api = tiers(admin(&proxy).await);
    proxy.inject(Fault::reset(Verb::Create).on(TIERS)).unwrap();
    let error = api
        .create(&PostParams::default(), &tier("reset", 10))
        .await
        .unwrap_err();
    assert!(!matches!(error, kube::Error::Api(_)), "{error:?}");
    assert!(
        io_kinds(&error).contains(&ErrorKind::ConnectionReset),
        "{error:?}"
    );
    assert_eq!(
        server.requests().count(tier_testserver::Verb::Create, None),
        0
    );
    // The next connection works.
    api.create(&PostParams::default(), &tier("reset", 10))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_lost_response_leaves_the_write_applied() {
    let server = server().await;
    let proxy = proxy(&server).await;
    let api = tiers(admin(&proxy).await);
    proxy
        .inject(Fault::lose_response(Verb::Create).on(TIERS).named("lost"))
        .unwrap();
    let error = api
        .create(&PostParams::default(), &tier("lost", 10))
        .await
        .unwrap_err();
    assert!(!matches!(error, kube::Error::Api(_)), "{error:?}");
    // The client never learnt it, but the Tier exists: a retry meets AlreadyExists.
    let got = api.get("lost").await.unwrap();
    assert_eq!(got.data["spec"]["priority"], 10);
    let (code, reason, _) = api_error(
        api.create(&PostParams::default(), &tier("lost", 10))
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (409, "AlreadyExists"));
    let log = proxy.requests();
    let lost = log.matching(Matcher::verb(Verb::Create).named("lost"))[0];
    assert_eq!(lost.fault, Some(FaultKind::LoseResponse));
    assert_eq!((lost.code, lost.upstream_code), (None, Some(201)));
}

#[tokio::test]
async fn bearer_tokens_pass_through_to_the_server() {
    let server = server().await;
    let proxy = proxy(&server).await;
    tiers(admin(&proxy).await)
        .list(&Default::default())
        .await
        .unwrap();
    assert_eq!(server.requests().records()[0].user.as_deref(), Some(ADMIN));
    let stranger = tiers(client(&proxy, "not-a-token", false).await);
    let (code, ..) = api_error(stranger.list(&Default::default()).await.unwrap_err());
    assert_eq!(code, 401);
}

#[tokio::test]
async fn creates_are_named_from_their_body_and_their_size_is_bounded() {
    let server = server().await;
    let limits = Limits {
        max_create_body: 1024,
        ..Limits::default()
    };
    let proxy = proxy_with(&server, limits).await;
    let api = tiers(admin(&proxy).await);
    proxy
        .inject(Fault::unavailable(Verb::Create).named("target"))
        .unwrap();
    api.create(&PostParams::default(), &tier("other", 10))
        .await
        .unwrap();
    let (code, ..) = api_error(
        api.create(&PostParams::default(), &tier("target", 11))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 503);
    let mut big = tier("big", 12);
    big.data["spec"]["description"] = "x".repeat(2048).into();
    let (code, reason, message) =
        api_error(api.create(&PostParams::default(), &big).await.unwrap_err());
    assert_eq!((code, reason.as_str()), (413, "RequestEntityTooLarge"));
    assert!(message.contains("Limits::max_create_body"), "{message}");
    assert_eq!(
        server.requests().count(tier_testserver::Verb::Create, None),
        1
    );
    let log = proxy.requests();
    assert_eq!(log.count(Matcher::verb(Verb::Create).named("other")), 1);
    assert_eq!(log.count(Matcher::verb(Verb::Create).named("target")), 1);
}

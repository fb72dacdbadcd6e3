//! Watches with plain requests: replay from a resourceVersion, synthetic ADDED, 410 Expired,
//! bookmarks, initial events, timeouts, selectors and `drop_watches`.

use std::time::{Duration, Instant};

use serde_json::json;
use tier_testserver::ServerConfig;
use tier_testserver::tier::tier;

use crate::common::{ADMIN_TOKEN, Http, SHORT, TIERS, WatchReader, server};

fn rv_of(event: &serde_json::Value) -> u64 {
    event["object"]["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn watch_streams_changes_after_the_resource_version() {
    let server = server(ServerConfig::default().bookmark_interval(None)).await;
    let http = Http::admin(&server);
    http.post(TIERS, &tier("before", 1, None)).await;
    let list = http.get(TIERS).await;
    let rv = list.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    // A change after the list but before the watch is replayed from history.
    http.post(TIERS, &tier("a", 2, None)).await;
    let mut watch = WatchReader::open(
        &http,
        &format!("resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=30"),
    )
    .await;
    http.merge_patch(&format!("{TIERS}/a"), &json!({"spec": {"priority": 3}}))
        .await;
    http.delete(&format!("{TIERS}/a"), None).await;
    let added = watch.next_change(SHORT).await.unwrap();
    assert_eq!(added["type"], "ADDED");
    assert_eq!(added["object"]["metadata"]["name"], "a");
    assert_eq!(added["object"]["kind"], "Tier");
    let modified = watch.next_change(SHORT).await.unwrap();
    assert_eq!(modified["type"], "MODIFIED");
    assert_eq!(modified["object"]["spec"]["priority"], 3);
    let deleted = watch.next_change(SHORT).await.unwrap();
    assert_eq!(deleted["type"], "DELETED");
    assert!(rv_of(&added) < rv_of(&modified) && rv_of(&modified) < rv_of(&deleted));
    assert_eq!(rv_of(&deleted), server.store().resource_version());
    assert_eq!(server.open_watches(), 1);
}

#[tokio::test]
async fn watch_from_zero_starts_with_synthetic_added_events() {
    let server = server(ServerConfig::default().bookmark_interval(None)).await;
    let http = Http::admin(&server);
    http.post(TIERS, &tier("a", 1, None)).await;
    http.post(TIERS, &tier("b", 2, None)).await;
    let mut watch = WatchReader::open(&http, "resourceVersion=0").await;
    for name in ["a", "b"] {
        let event = watch.next(SHORT).await.unwrap();
        assert_eq!(event["type"], "ADDED");
        assert_eq!(event["object"]["metadata"]["name"], name);
    }
}

#[tokio::test]
async fn too_old_resource_version_gets_an_expired_error_event() {
    let server = server(ServerConfig::default().watch_window(2)).await;
    let http = Http::admin(&server);
    let start = server.store().resource_version();
    for i in 0..4 {
        http.post(TIERS, &tier(&format!("t{i}"), i, None)).await;
    }
    let mut watch = WatchReader::open(&http, &format!("resourceVersion={start}")).await;
    let event = watch.next(SHORT).await.unwrap();
    assert_eq!(event["type"], "ERROR");
    assert_eq!(event["object"]["kind"], "Status");
    assert_eq!(event["object"]["code"], 410);
    assert_eq!(event["object"]["reason"], "Expired");
    assert!(
        event["object"]["message"]
            .as_str()
            .unwrap()
            .starts_with("too old resource version")
    );
    assert_eq!(watch.next(SHORT).await, None);
}

#[tokio::test]
async fn expire_next_watch_expires_exactly_one_watch() {
    let server = server(ServerConfig::default().bookmark_interval(None)).await;
    let http = Http::admin(&server);
    let rv = server.store().resource_version();
    server.expire_next_watch();
    let mut first = WatchReader::open(&http, &format!("resourceVersion={rv}")).await;
    let event = first.next(SHORT).await.unwrap();
    assert_eq!(event["type"], "ERROR");
    assert_eq!(event["object"]["code"], 410);
    assert_eq!(first.next(SHORT).await, None);
    let mut second = WatchReader::open(&http, &format!("resourceVersion={rv}")).await;
    http.post(TIERS, &tier("a", 1, None)).await;
    assert_eq!(second.next(SHORT).await.unwrap()["type"], "ADDED");
}

#[tokio::test]
async fn drop_watches_ends_every_open_stream() {
    let server = server(ServerConfig::default().bookmark_interval(None)).await;
    let http = Http::admin(&server);
    let mut a = WatchReader::open(&http, "resourceVersion=0").await;
    let mut b = WatchReader::open(&http, "resourceVersion=0").await;
    assert!(server.wait_for_watches(2, SHORT).await);
    server.drop_watches();
    assert_eq!(a.next(SHORT).await, None);
    assert_eq!(b.next(SHORT).await, None);
    let deadline = Instant::now() + SHORT;
    while server.open_watches() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(server.open_watches(), 0);
}

#[tokio::test]
async fn watch_closes_after_timeout_seconds() {
    let server = server(ServerConfig::default().bookmark_interval(None)).await;
    let http = Http::admin(&server);
    let started = Instant::now();
    let mut watch = WatchReader::open(&http, "resourceVersion=0&timeoutSeconds=1").await;
    assert_eq!(watch.next(SHORT).await, None);
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(900), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
}

#[tokio::test]
async fn bookmarks_carry_the_current_resource_version() {
    let server =
        server(ServerConfig::default().bookmark_interval(Some(Duration::from_millis(50)))).await;
    let http = Http::admin(&server);
    http.post(TIERS, &tier("a", 1, None)).await;
    let rv = server.store().resource_version();
    let mut watch = WatchReader::open(
        &http,
        &format!("resourceVersion={rv}&allowWatchBookmarks=true"),
    )
    .await;
    let bookmark = watch.next(SHORT).await.unwrap();
    assert_eq!(bookmark["type"], "BOOKMARK");
    assert_eq!(bookmark["object"]["kind"], "Tier");
    assert_eq!(bookmark["object"]["apiVersion"], "crd.antrea.io/v1beta1");
    assert_eq!(
        bookmark["object"]["metadata"]["resourceVersion"],
        rv.to_string()
    );
    // Without allowWatchBookmarks there are none.
    let mut quiet = WatchReader::open(&http, &format!("resourceVersion={rv}")).await;
    http.post(TIERS, &tier("b", 2, None)).await;
    assert_eq!(quiet.next(SHORT).await.unwrap()["type"], "ADDED");
}

#[tokio::test]
async fn send_initial_events_ends_with_an_annotated_bookmark() {
    let server = server(ServerConfig::default().bookmark_interval(None)).await;
    let http = Http::admin(&server);
    http.post(TIERS, &tier("a", 1, None)).await;
    let mut watch = WatchReader::open(
        &http,
        "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&resourceVersion=",
    )
    .await;
    assert_eq!(watch.next(SHORT).await.unwrap()["type"], "ADDED");
    let end = watch.next(SHORT).await.unwrap();
    assert_eq!(end["type"], "BOOKMARK");
    assert_eq!(
        end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert_eq!(
        end["object"]["metadata"]["resourceVersion"],
        server.store().resource_version().to_string()
    );
}

#[tokio::test]
async fn other_actor_writes_reach_watches() {
    let server = server(ServerConfig::default().bookmark_interval(None)).await;
    let http = Http::admin(&server);
    let mut watch = WatchReader::open(&http, "resourceVersion=0").await;
    server.store().create(tier("x", 1, None)).unwrap();
    server
        .store()
        .put_raw(json!({"metadata": {"name": "x"}, "spec": {"priority": 2}}))
        .unwrap();
    server.store().delete("x").unwrap();
    let kinds: Vec<_> = [
        watch.next(SHORT).await.unwrap(),
        watch.next(SHORT).await.unwrap(),
        watch.next(SHORT).await.unwrap(),
    ]
    .iter()
    .map(|e| e["type"].as_str().unwrap().to_owned())
    .collect();
    assert_eq!(kinds, ["ADDED", "MODIFIED", "DELETED"]);
}

#[tokio::test]
async fn watches_beyond_the_bound_get_429_until_one_closes() {
    let limits = tier_testserver::Limits {
        max_watches: 1,
        ..Default::default()
    };
    let server = server(ServerConfig::default().limits(limits)).await;
    let http = Http::admin(&server);
    let first = WatchReader::open(&http, "").await;
    assert!(server.wait_for_watches(1, SHORT).await);
    let refused = http.get(&format!("{TIERS}?watch=true")).await;
    assert_eq!(refused.code, 429, "{refused:?}");
    assert_eq!(refused.headers["retry-after"], "1");
    drop(first);
    let deadline = Instant::now() + SHORT;
    while server.open_watches() > 0 {
        assert!(Instant::now() < deadline, "the first watch never closed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _second = WatchReader::open(&http, "").await;
}

#[tokio::test]
async fn the_request_log_keeps_the_last_records() {
    let limits = tier_testserver::Limits {
        max_log_records: 3,
        ..Default::default()
    };
    let server = server(ServerConfig::default().limits(limits)).await;
    let http = Http::admin(&server);
    for _ in 0..5 {
        http.get(TIERS).await;
    }
    let log = server.requests();
    let seqs: Vec<u64> = log.records().iter().map(|r| r.seq).collect();
    assert_eq!(seqs, [2, 3, 4]);
}

#[tokio::test]
async fn a_client_that_stops_reading_loses_its_watch_at_the_timeout() {
    let server = server(ServerConfig::default().watch_window(10)).await;
    server.store().create(tier("t", 1, None)).unwrap();
    // Opened on a raw socket, never read.
    let mut stalled = std::net::TcpStream::connect(server.addr()).unwrap();
    let request = format!(
        "GET {TIERS}?watch=true&timeoutSeconds=1 HTTP/1.1\r\nHost: x\r\n\
         Authorization: Bearer {ADMIN_TOKEN}\r\n\r\n"
    );
    std::io::Write::write_all(&mut stalled, request.as_bytes()).unwrap();
    assert!(server.wait_for_watches(1, SHORT).await);
    // Far more than the stream buffer (256 events) and the sockets hold: the watch task
    // blocks on sending.
    let big = "x".repeat(16 * 1024);
    for i in 0..600 {
        server
            .store()
            .modify("t", |t| {
                t["spec"]["description"] = json!(format!("{i}{big}"))
            })
            .unwrap();
    }
    let deadline = Instant::now() + SHORT;
    while server.open_watches() > 0 {
        assert!(
            Instant::now() < deadline,
            "a stalled watch outlived its timeout"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(stalled);
}

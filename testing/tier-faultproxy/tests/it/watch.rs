//! Watches through the proxy: streamed as they come, dropped (cleanly or by reset) and expired,
//! each time re-established by kube-runtime's watcher.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use futures::{StreamExt, TryStreamExt};
use kube::api::{PostParams, WatchEvent, WatchParams};
use kube::runtime::watcher;
use tier_faultproxy::{Fault, FaultKind, Matcher, Verb, WatchEnd};

use crate::common::{PATIENCE, TIERS, admin, proxy, server, tier, tiers};

/// The names a watcher has seen, filled by a task until dropped.
struct Seen {
    names: Arc<Mutex<BTreeSet<String>>>,
    errors: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Seen {
    fn start(api: kube::Api<kube::api::DynamicObject>) -> Self {
        let names = Arc::new(Mutex::new(BTreeSet::new()));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn({
            let (names, errors) = (Arc::clone(&names), Arc::clone(&errors));
            async move {
                let mut stream = watcher(api, watcher::Config::default()).boxed();
                while let Some(event) = stream.next().await {
                    match event {
                        Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                            if let Some(name) = o.metadata.name {
                                names.lock().unwrap().insert(name);
                            }
                        }
                        Ok(_) => {}
                        Err(e) => errors.lock().unwrap().push(e.to_string()),
                    }
                }
            }
        });
        Self {
            names,
            errors,
            task,
        }
    }

    async fn until_seen(&self, name: &str) {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while !self.names.lock().unwrap().contains(name) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{name} not seen; errors: {:?}",
                self.errors.lock().unwrap()
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}

impl Drop for Seen {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test]
async fn watch_events_stream_through_as_they_happen() {
    let server = server().await;
    let proxy = proxy(&server).await;
    let api = tiers(admin(&proxy).await);
    let stream = api.watch(&WatchParams::default(), "0").await.unwrap();
    let mut stream = stream.boxed();
    assert!(
        proxy
            .wait_for_requests(|log| log.count(Verb::Watch) == 1, PATIENCE)
            .await
    );
    assert_eq!(proxy.open_watches(), 1);
    for name in ["first", "second"] {
        api.create(&PostParams::default(), &tier(name, 10 + name.len() as i64))
            .await
            .unwrap();
        // Each event arrives while the stream is open: nothing waits for the end.
        let event = tokio::time::timeout(PATIENCE, stream.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let WatchEvent::Added(object) = event else {
            panic!("{event:?}");
        };
        assert_eq!(object.metadata.name.as_deref(), Some(name));
    }
    drop(stream);
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while proxy.open_watches() != 0 {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn watches_ended_after_an_event_are_resumed_without_a_new_list() {
    let server = server().await;
    let proxy = proxy(&server).await;
    let api = tiers(admin(&proxy).await);
    proxy
        .inject(Fault::end_watch_after_events(1).on(TIERS).times(3))
        .unwrap();
    let seen = Seen::start(api.clone());
    assert!(proxy.wait_for_count(Verb::Watch, 1, PATIENCE).await);
    for (i, name) in ["one", "two", "three", "four"].into_iter().enumerate() {
        api.create(&PostParams::default(), &tier(name, 10 + i as i64))
            .await
            .unwrap();
        seen.until_seen(name).await;
    }
    let log = proxy.requests();
    // A clean end resumes from the last resourceVersion: no event lost, no list again.
    assert_eq!(log.count(Verb::List), 1);
    assert!(
        log.count(Verb::Watch) >= 4,
        "{:?}",
        log.matching(Verb::Watch)
    );
    assert_eq!(log.count_where(|r| r.fault == Some(FaultKind::EndWatch)), 3);
    assert!(seen.errors.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_watch_reset_mid_stream_is_an_error_the_watcher_recovers_from() {
    let server = server().await;
    let proxy = proxy(&server).await;
    let api = tiers(admin(&proxy).await);
    proxy
        .inject(Fault::end_watch_after_events(1).on(TIERS).abruptly())
        .unwrap();
    let seen = Seen::start(api.clone());
    assert!(proxy.wait_for_count(Verb::Watch, 1, PATIENCE).await);
    api.create(&PostParams::default(), &tier("one", 10))
        .await
        .unwrap();
    seen.until_seen("one").await;
    // The reset comes right after the event: the watcher reports it and watches again.
    assert!(proxy.wait_for_count(Verb::Watch, 2, PATIENCE).await);
    api.create(&PostParams::default(), &tier("two", 11))
        .await
        .unwrap();
    seen.until_seen("two").await;
    let errors = seen.errors.lock().unwrap().clone();
    assert!(!errors.is_empty(), "a reset is not a clean end");
}

#[tokio::test]
async fn an_expired_watch_makes_the_watcher_list_again() {
    let server = server().await;
    let proxy = proxy(&server).await;
    let api = tiers(admin(&proxy).await);
    api.create(&PostParams::default(), &tier("before", 10))
        .await
        .unwrap();
    proxy.inject(Fault::expire_watch().on(TIERS)).unwrap();
    let seen = Seen::start(api.clone());
    seen.until_seen("before").await;
    assert!(proxy.wait_for_count(Verb::List, 2, PATIENCE).await);
    assert!(proxy.wait_for_count(Verb::Watch, 2, PATIENCE).await);
    api.create(&PostParams::default(), &tier("after", 11))
        .await
        .unwrap();
    seen.until_seen("after").await;
    let log = proxy.requests();
    let expired = log.matching(Verb::Watch)[0];
    assert_eq!(
        (expired.fault, expired.code, expired.upstream_code),
        (Some(FaultKind::ExpireWatch), Some(200), None)
    );
    let errors = seen.errors.lock().unwrap().clone();
    assert!(
        errors
            .iter()
            .any(|e| e.contains("410") || e.contains("Expired")),
        "{errors:?}"
    );
}

#[tokio::test]
async fn a_410_answer_to_the_watch_request_itself_is_retried_without_a_list() {
    // kube-apiserver sends 410 for a compacted watch as an ERROR event (above); a 410 status
    // on the request itself makes kube-runtime retry the watch from the same version.
    let server = server().await;
    let proxy = proxy(&server).await;
    let api = tiers(admin(&proxy).await);
    proxy
        .inject(Fault::expired(Matcher::verb(Verb::Watch).on(TIERS)))
        .unwrap();
    let seen = Seen::start(api.clone());
    assert!(proxy.wait_for_count(Verb::Watch, 2, PATIENCE).await);
    api.create(&PostParams::default(), &tier("after", 11))
        .await
        .unwrap();
    seen.until_seen("after").await;
    let log = proxy.requests();
    assert_eq!(log.count(Verb::List), 1);
    assert_eq!(log.count_code(Verb::Watch, 410), 1);
}

#[tokio::test]
async fn drop_watches_ends_the_open_ones_and_the_watcher_comes_back() {
    let server = server().await;
    let proxy = proxy(&server).await;
    let api = tiers(admin(&proxy).await);
    let seen = Seen::start(api.clone());
    assert!(proxy.wait_for_count(Verb::Watch, 1, PATIENCE).await);
    for (i, end) in [WatchEnd::Clean, WatchEnd::Reset].into_iter().enumerate() {
        proxy.drop_watches(end);
        assert!(proxy.wait_for_count(Verb::Watch, i + 2, PATIENCE).await);
        let name = format!("after-{i}");
        api.create(&PostParams::default(), &tier(&name, 10 + i as i64))
            .await
            .unwrap();
        seen.until_seen(&name).await;
    }
    assert_eq!(proxy.open_watches(), 1);
    assert_eq!(proxy.requests().count(Verb::List), 1);
}

//! What an embedder relies on, through real HTTP: one Tier watch shared by the controller and
//! tierd, the writer made from the lister, the identity the webhook should let through, and a
//! shared client that keeps kube's retries while the writer's does not.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{PATIENCE, USER, start, synced};
use futures::StreamExt;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use tier_core::{DesiredSet, DriverConfig, Mode, Stopped, TierLister};
use tier_kube::crd::Tier;
use tier_kube::identity::IdentityError;
use tier_kube::lister::KubeLister;
use tier_testserver::{Fault, ServerConfig, Verb};

#[tokio::test]
async fn one_watch_serves_the_embedder_and_tierd() {
    let h = start(ServerConfig::default()).await;
    h.seed("platform", 7, Some("drifted"));
    h.server
        .store()
        .modify("platform", |obj| {
            obj["metadata"]["labels"] = serde_json::json!({"team": "net"});
        })
        .unwrap();

    // The embedder's reflector, on its shared client.
    let (store, writer) = reflector::store::<Tier>();
    let (lister, mut feed) = KubeLister::shared(store.clone());
    let seen = Arc::new(AtomicUsize::new(0));
    let counted = seen.clone();
    let tiers = reflector(
        writer,
        watcher(kube::Api::all(h.client.clone()), watcher::Config::default()),
    )
    .default_backoff()
    .inspect(move |event| feed.observe(event))
    .applied_objects();
    // The embedder's own consumer of the stream (its controller, in real code).
    let controller = tokio::spawn(async move {
        let mut tiers = std::pin::pin!(tiers);
        while let Some(tier) = tiers.next().await {
            if tier.is_ok() {
                counted.fetch_add(1, Ordering::Relaxed);
            }
        }
    });

    synced(&lister).await;
    let writer = lister.writer(h.writer_client.clone(), common::writer_config());
    let ensurer = tier_runtime::spawn(
        lister.clone(),
        writer,
        DesiredSet::antrea(),
        DriverConfig::default(),
        Mode::Once,
    )
    .unwrap();
    let stopped = tokio::time::timeout(PATIENCE, ensurer.join())
        .await
        .unwrap();
    assert_eq!(stopped, Stopped::Converged);

    let log = h.server.requests();
    assert_eq!(log.count(Verb::List, None), 1, "one list: one reflector");
    assert_eq!(log.count(Verb::Watch, None), 1, "one watch: one reflector");
    // The correction kept the labels: it started from the shared store.
    let stored = h.server.store().get("platform").unwrap();
    assert_eq!(stored["metadata"]["labels"]["team"], "net");
    assert_eq!(stored["spec"]["priority"], 200);
    // The embedder's controller saw the Tiers tierd created, on the same stream.
    common::until(&lister, |s| s.tiers.as_ref().is_some_and(|t| t.len() == 6)).await;
    assert!(seen.load(Ordering::Relaxed) >= 6);
    assert!(store.get(&reflector::ObjectRef::new("emergency")).is_some());
    controller.abort();
}

#[tokio::test]
async fn a_lister_can_poll_an_embedders_reflector_stream() {
    let h = start(ServerConfig::default()).await;
    h.seed("a", 1, None);
    let (store, writer) = reflector::store::<Tier>();
    let events = reflector(
        writer,
        watcher(
            kube::Api::all(h.client.clone()),
            watcher::Config::default().timeout(30),
        ),
    );
    let lister = KubeLister::from_reflector(store.clone(), events).unwrap();
    synced(&lister).await;
    assert!(lister.snapshot().observe("a") != tier_core::Observed::Absent);
    h.seed("b", 2, None);
    common::until(&lister, |s| s.observe("b") != tier_core::Observed::Absent).await;
    assert_eq!(
        store.state().len(),
        2,
        "the embedder's store is the lister's"
    );
}

#[tokio::test]
async fn whoami_names_the_user_of_the_clients_credentials() {
    let h = start(ServerConfig::default()).await;
    assert_eq!(tier_kube::identity::whoami(&h.client).await.unwrap(), USER);
}

#[tokio::test]
async fn whoami_on_a_server_without_self_subject_review_is_unsupported() {
    let h = start(ServerConfig::default().without_self_subject_review()).await;
    let error = tier_kube::identity::whoami(&h.client).await.unwrap_err();
    assert!(matches!(error, IdentityError::Unsupported), "{error}");
    assert!(error.to_string().contains("--controller-user"), "{error}");
}

#[tokio::test]
async fn the_shared_client_keeps_kubes_retries_and_the_writers_does_not() {
    let h = start(ServerConfig::default()).await;
    h.seed("a", 1, None);
    let api: kube::Api<Tier> = kube::Api::all(h.client.clone());
    h.server.inject(Fault::unavailable(Verb::Get));
    api.get("a")
        .await
        .expect("kube's retry layer repeats one 503");
    assert_eq!(h.server.requests().count(Verb::Get, Some("a")), 2);

    let (_lister, writer) = h.cached_writer().await;
    h.server.inject(Fault::unavailable(Verb::Update));
    let rv = h.rv("a");
    let error = tier_core::TierWriter::update(&writer, &tier_core::TierSpec::new("a", 2, ""), &rv)
        .await
        .unwrap_err();
    assert_eq!(error.class, tier_core::ErrorClass::Transient);
    assert_eq!(h.server.requests().count(Verb::Update, Some("a")), 1);
}

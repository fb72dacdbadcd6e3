//! What an embedder relies on, against a real kube-apiserver (tier-testcluster) through a fault
//! proxy that counts requests (tier-faultproxy): one Tier watch shared by the controller and
//! tierd, the writer made from the lister, the identity the webhook should let through, and a
//! shared client that keeps kube's retries while the writer's does not.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::real::start;
use common::{PATIENCE, USER, synced};
use futures::StreamExt;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use tier_core::{DesiredSet, DriverConfig, Mode, Stopped, TierLister};
use tier_faultproxy::{Fault, Matcher, Verb};
use tier_kube::crd::Tier;
use tier_kube::identity::IdentityError;
use tier_kube::lister::KubeLister;

const TIERS: &str = "tiers.crd.antrea.io";

fn on(verb: Verb) -> Matcher {
    Matcher::verb(verb).on(TIERS)
}

#[tokio::test]
async fn one_watch_serves_the_embedder_and_tierd() {
    let h = start().await;
    h.seed("platform", 7, Some("drifted")).await;
    h.modify("platform", |t| {
        t.metadata.labels = Some([("team".to_owned(), "net".to_owned())].into());
    })
    .await;

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

    let log = h.proxy.requests();
    assert_eq!(log.count(on(Verb::List)), 1, "one list: one reflector");
    assert_eq!(log.count(on(Verb::Watch)), 1, "one watch: one reflector");
    // The correction kept the labels: it started from the shared store.
    let stored = h.get("platform").await.unwrap();
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
    let h = start().await;
    h.seed("a", 1, None).await;
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
    h.seed("b", 2, None).await;
    common::until(&lister, |s| s.observe("b") != tier_core::Observed::Absent).await;
    assert_eq!(
        store.state().len(),
        2,
        "the embedder's store is the lister's"
    );
}

#[tokio::test]
async fn whoami_names_the_user_of_the_clients_credentials() {
    let h = start().await;
    assert_eq!(tier_kube::identity::whoami(&h.client).await.unwrap(), USER);
}

#[tokio::test]
async fn whoami_on_a_server_without_self_subject_review_is_unsupported() {
    let h = start().await;
    // An API server older than 1.28 (or with the API off) answers 404 for the resource.
    h.proxy
        .inject(Fault::status(
            Matcher::any().at_path("/apis/authentication.k8s.io/v1/selfsubjectreviews"),
            404,
            "NotFound",
            "the server could not find the requested resource",
        ))
        .unwrap();
    let error = tier_kube::identity::whoami(&h.client).await.unwrap_err();
    assert!(matches!(error, IdentityError::Unsupported), "{error}");
    assert!(error.to_string().contains("--controller-user"), "{error}");
}

#[tokio::test]
async fn the_shared_client_keeps_kubes_retries_and_the_writers_does_not() {
    let h = start().await;
    h.seed("a", 1, None).await;
    let api: kube::Api<Tier> = kube::Api::all(h.client.clone());
    h.proxy.inject(Fault::unavailable(on(Verb::Get))).unwrap();
    api.get("a")
        .await
        .expect("kube's retry layer repeats one 503");
    assert_eq!(h.proxy.requests().count(on(Verb::Get).named("a")), 2);

    let (_lister, writer) = h.cached_writer().await;
    h.proxy
        .inject(Fault::unavailable(on(Verb::Update)))
        .unwrap();
    let rv = h.rv("a").await;
    let error = tier_core::TierWriter::update(&writer, &tier_core::TierSpec::new("a", 2, ""), &rv)
        .await
        .unwrap_err();
    assert_eq!(error.class, tier_core::ErrorClass::Transient);
    assert_eq!(h.proxy.requests().count(on(Verb::Update).named("a")), 1);
}

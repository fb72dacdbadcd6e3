//! Calico's adapter through real HTTP against the test API server serving Calico's Tier (its
//! CRD schema, defaults and CEL rules): the shared lister and writer on `CalicoTier`, at both
//! group/versions.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::{Harness, PATIENCE, USER, start};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tier_core::calico::{self as core_calico, Calico, DefaultAction, TierSpec};
use tier_core::{ErrorClass, Observed, Snapshot, TierLister, TierWriter, WriteError};
use tier_kube::calico::{CalicoApi, CalicoTier};
use tier_kube::{KubeLister, KubeWriter};
use tier_testserver::{CalicoApi as ServedApi, Endpoint, Fault, ServerConfig, Verb};

/// The test server's name for the same API.
fn served(api: CalicoApi) -> ServedApi {
    match api {
        CalicoApi::V3 => ServedApi::V3,
        CalicoApi::CrdV1 => ServedApi::CrdV1,
    }
}

async fn calico(api: CalicoApi) -> Harness {
    start(ServerConfig::default().calico(served(api))).await
}

/// A started Calico lister (on the no-retry client, so every failed list reaches its stats).
fn lister(h: &Harness, api: CalicoApi) -> KubeLister<CalicoTier> {
    KubeLister::watch(
        h.writer_client.clone(),
        api.resource(),
        watcher::Config::default(),
    )
    .unwrap()
}

async fn synced(lister: &KubeLister<CalicoTier>) {
    tokio::time::timeout(PATIENCE, lister.wait_synced())
        .await
        .expect("the Calico lister never synced");
}

/// A synced lister and a writer over its store, with a short call timeout.
async fn cached_writer(
    h: &Harness,
    api: CalicoApi,
) -> (KubeLister<CalicoTier>, KubeWriter<CalicoTier>) {
    let lister = lister(h, api);
    synced(&lister).await;
    let writer = lister.writer(h.writer_client.clone(), common::writer_config());
    (lister, writer)
}

async fn until(
    lister: &KubeLister<CalicoTier>,
    pred: impl Fn(&Snapshot<Calico>) -> bool,
) -> Snapshot<Calico> {
    tokio::time::timeout(PATIENCE, async {
        loop {
            let snapshot = lister.snapshot();
            if pred(&snapshot) {
                return snapshot;
            }
            lister.changed(snapshot.generation).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("never reached: {:?}", lister.snapshot()))
}

fn present(snapshot: &Snapshot<Calico>, name: &str) -> core_calico::ObservedTier {
    match snapshot.observe(name) {
        Observed::Present(tier) => tier,
        other => panic!("{name}: {other:?}"),
    }
}

/// The stored `(order, defaultAction)` of `name`.
fn stored(h: &Harness, name: &str) -> Option<(Option<f64>, Option<String>)> {
    let obj = h.server.store().calico().get(name)?;
    Some((
        tier_testserver::calico::order(&obj),
        tier_testserver::calico::default_action(&obj).map(str::to_owned),
    ))
}

fn rv(h: &Harness, name: &str) -> String {
    let obj = h.server.store().calico().get(name).unwrap();
    obj["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn assert_class(result: Result<(), WriteError>, class: ErrorClass) -> WriteError {
    let error = result.expect_err("the write should fail");
    assert_eq!(error.class, class, "{error:?}");
    error
}

fn default_tier() -> TierSpec {
    TierSpec::new(
        core_calico::DEFAULT,
        Some(core_calico::DEFAULT_ORDER),
        DefaultAction::Deny,
    )
}

#[tokio::test]
async fn the_lister_lists_and_watches_calicos_tiers_at_either_api() {
    for api in CalicoApi::ALL {
        let h = calico(api).await;
        h.server.store().calico().create_builtins().unwrap();
        let lister = lister(&h, api);
        synced(&lister).await;
        let snapshot = lister.snapshot();
        assert_eq!(snapshot.tiers.as_ref().unwrap().len(), 3, "{api}");
        for desired in core_calico::built_ins() {
            let observed = present(&snapshot, &desired.name);
            assert!(
                core_calico::in_sync(&desired, &observed),
                "{api}: {observed:?}"
            );
            assert!(!observed.resource_version.is_empty());
        }

        // Another actor adds, changes and deletes a Tier of its own (the built-ins are pinned).
        h.server
            .store()
            .calico()
            .create(tier_testserver::calico::tier(
                served(api),
                "team",
                Some(10.5),
                Some("Pass"),
            ))
            .unwrap();
        let snapshot = until(&lister, |s| {
            matches!(s.observe("team"), Observed::Present(_))
        })
        .await;
        let team = present(&snapshot, "team");
        assert_eq!(team.order, Some(10.5));
        assert_eq!(team.default_action, DefaultAction::Pass);
        let before = snapshot.generation;
        h.server
            .store()
            .calico()
            .modify("team", |obj| {
                obj["spec"]
                    .as_object_mut()
                    .unwrap()
                    .remove("order")
                    .unwrap();
            })
            .unwrap();
        let snapshot = until(
            &lister,
            |s| matches!(s.observe("team"), Observed::Present(t) if t.order.is_none()),
        )
        .await;
        assert!(snapshot.generation > before);
        h.server.store().calico().delete("team").unwrap();
        until(&lister, |s| s.observe("team") == Observed::Absent).await;
        // No failed list or watch on the way.
        assert_eq!(lister.watch_stats().errors, 0, "{:?}", lister.watch_stats());
    }
}

#[tokio::test]
async fn the_writer_creates_calicos_built_ins_with_the_field_manager() {
    for api in CalicoApi::ALL {
        let h = calico(api).await;
        let (_lister, writer) = cached_writer(&h, api).await;
        for desired in core_calico::built_ins() {
            writer.create(&desired).await.unwrap();
        }
        assert_eq!(
            stored(&h, "kube-admin"),
            Some((Some(1000.0), Some("Pass".into())))
        );
        assert_eq!(
            stored(&h, "default"),
            Some((Some(1_000_000.0), Some("Deny".into())))
        );
        assert_eq!(
            stored(&h, "kube-baseline"),
            Some((Some(10_000_000.0), Some("Pass".into())))
        );
        let log = h.server.requests();
        assert_eq!(
            log.count_at(Endpoint::CalicoTiers, Verb::Create, None),
            3,
            "{api}"
        );
        let creates: Vec<_> = log
            .records()
            .iter()
            .filter(|r| r.is_at(Endpoint::CalicoTiers, Verb::Create, None))
            .collect();
        for create in creates {
            assert_eq!(create.code, Some(201), "{create:?}");
            assert!(create.query.contains("fieldManager=tierd"), "{create:?}");
            assert_eq!(create.user.as_deref(), Some(USER));
        }
        // Antrea's Tiers were not touched.
        assert!(h.server.store().list().is_empty());
    }
}

#[tokio::test]
async fn a_tier_without_an_order_is_created_without_one() {
    let h = calico(CalicoApi::V3).await;
    let (_lister, writer) = cached_writer(&h, CalicoApi::V3).await;
    writer
        .create(&TierSpec::new("last", None, DefaultAction::Pass))
        .await
        .unwrap();
    assert_eq!(stored(&h, "last"), Some((None, Some("Pass".into()))));
}

#[tokio::test]
async fn an_update_corrects_a_wrong_built_in_on_its_resource_version_keeping_the_rest() {
    let h = calico(CalicoApi::V3).await;
    let mut wrong =
        tier_testserver::calico::tier(ServedApi::V3, "default", Some(5.0), Some("Pass"));
    wrong["metadata"]["labels"] = json!({"team": "net"});
    // As an older Calico could have left it: the CEL rules would refuse this write.
    h.server.store().calico().put_raw(wrong).unwrap();
    let (lister, writer) = cached_writer(&h, CalicoApi::V3).await;
    let observed = present(&lister.snapshot(), "default");
    assert_eq!(observed.order, Some(5.0));
    assert!(!core_calico::in_sync(&default_tier(), &observed));

    writer
        .update(&default_tier(), &observed.resource_version)
        .await
        .unwrap();
    assert_eq!(
        stored(&h, "default"),
        Some((Some(1_000_000.0), Some("Deny".into())))
    );
    let stored_obj: Value = h.server.store().calico().get("default").unwrap();
    assert_eq!(stored_obj["metadata"]["labels"]["team"], "net");
    let log = h.server.requests();
    assert_eq!(
        log.count_at(Endpoint::CalicoTiers, Verb::Update, Some("default")),
        1
    );
    let snapshot = until(
        &lister,
        |s| matches!(s.observe("default"), Observed::Present(t) if t.order == Some(1_000_000.0)),
    )
    .await;
    assert!(core_calico::in_sync(
        &default_tier(),
        &present(&snapshot, "default")
    ));
}

#[tokio::test]
async fn an_update_on_a_stale_resource_version_is_a_stale_conflict() {
    let h = calico(CalicoApi::V3).await;
    h.server
        .store()
        .calico()
        .create(tier_testserver::calico::tier(
            ServedApi::V3,
            "team",
            Some(1.0),
            None,
        ))
        .unwrap();
    let old = rv(&h, "team");
    let (_lister, writer) = cached_writer(&h, CalicoApi::V3).await;
    h.server
        .store()
        .calico()
        .modify("team", |obj| obj["spec"]["order"] = json!(2))
        .unwrap();
    let error = assert_class(
        writer
            .update(&TierSpec::new("team", Some(3.0), DefaultAction::Deny), &old)
            .await,
        ErrorClass::Stale,
    );
    assert!(error.message.contains("modified"), "{error:?}");
    let conflicts = h.server.requests().count_where(|r| {
        r.is_at(Endpoint::CalicoTiers, Verb::Update, Some("team")) && r.code == Some(409)
    });
    assert_eq!(conflicts, 1);
    assert_eq!(stored(&h, "team").unwrap().0, Some(2.0));
}

#[tokio::test]
async fn a_forbidden_create_is_forbidden_with_the_permission_named() {
    let h = calico(CalicoApi::V3).await;
    let fault = h
        .server
        .inject(Fault::forbidden_on(ServedApi::V3.resource(), Verb::Create, USER).forever());
    let (_lister, writer) = cached_writer(&h, CalicoApi::V3).await;
    let error = assert_class(writer.create(&default_tier()).await, ErrorClass::Forbidden);
    assert_eq!(
        error.permission.as_deref(),
        Some("create resource \"tiers\" in API group \"projectcalico.org\" at the cluster scope"),
        "{error:?}"
    );
    assert!(
        error
            .message
            .contains("tiers.projectcalico.org is forbidden"),
        "{error:?}"
    );
    assert!(stored(&h, "default").is_none());
    // Granted: the same create goes through.
    assert!(h.server.remove_fault(fault));
    writer.create(&default_tier()).await.unwrap();
    assert!(stored(&h, "default").is_some());
}

#[tokio::test]
async fn a_built_in_with_other_values_is_denied_by_calicos_rules() {
    let h = calico(CalicoApi::V3).await;
    let (_lister, writer) = cached_writer(&h, CalicoApi::V3).await;
    let wrong = TierSpec::new(core_calico::DEFAULT, Some(5.0), DefaultAction::Deny);
    let error = assert_class(writer.create(&wrong).await, ErrorClass::Denied);
    assert!(
        error.message.contains("default tier order must be 1000000"),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_missing_crd_is_not_installed_until_it_is_installed() {
    let h = start(ServerConfig::default().calico_not_installed(ServedApi::V3)).await;
    // tierd's start-up pace (at most 2 s between lists), so it syncs soon after the install.
    let lister = KubeLister::<CalicoTier>::watch_with_backoff(
        h.writer_client.clone(),
        CalicoApi::V3.resource(),
        watcher::Config::default(),
        tier_kube::RetryBackoff::default(),
    )
    .unwrap();
    let writer = lister.writer(h.writer_client.clone(), common::writer_config());
    // The list is answered 404: not synced, and the last error says what is missing.
    tokio::time::timeout(PATIENCE, async {
        while lister.watch_stats().errors == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap();
    assert!(!lister.snapshot().is_synced());
    let stats = lister.watch_stats();
    let words = stats.last_error.unwrap();
    assert!(
        words.contains("the Tier CRD (tiers.projectcalico.org) is not installed"),
        "{words}"
    );
    assert!(!words.contains("antrea"), "{words}");
    let error = assert_class(
        writer.create(&default_tier()).await,
        ErrorClass::NotInstalled,
    );
    assert!(
        error
            .message
            .contains("is the Tier CRD (tiers.projectcalico.org) installed?"),
        "{error:?}"
    );

    h.server.store().calico().install();
    synced(&lister).await;
    assert_eq!(lister.snapshot().tiers.unwrap().len(), 0);
    writer.create(&default_tier()).await.unwrap();
    until(&lister, |s| {
        matches!(s.observe("default"), Observed::Present(_))
    })
    .await;
}

/// An order with all 17 significant digits in use reads back as written: the core compares
/// orders exactly, so anything else would have tierd correct this Tier forever.
#[tokio::test]
async fn a_written_order_reads_back_exactly() {
    let h = calico(CalicoApi::V3).await;
    let (lister, writer) = cached_writer(&h, CalicoApi::V3).await;
    let desired = TierSpec::new("precise", Some(123_456_789.123_456_79), DefaultAction::Pass);
    writer.create(&desired).await.unwrap();
    let snapshot = until(&lister, |s| {
        matches!(s.observe("precise"), Observed::Present(_))
    })
    .await;
    let observed = present(&snapshot, "precise");
    assert_eq!(
        observed.order.map(f64::to_bits),
        desired.order.map(f64::to_bits)
    );
    assert!(core_calico::in_sync(&desired, &observed));
}

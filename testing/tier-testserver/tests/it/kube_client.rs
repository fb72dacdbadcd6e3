//! The real kube client against the server: CRUD and error classification, paging, the
//! watcher's relist after 410 and resume after dropped watches, events, and faults.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::DynamicObject;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::Store as Reader;
use kube::runtime::reflector::store::Writer;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tier_testserver::tier::tier;
use tier_testserver::{AdmissionMode, Fault, ServerConfig, Verb};

use crate::common::{
    ADMIN, CONTROLLER, SHORT, dynamic_tier, kube_client, server, tier_resource, tiers_api,
};

fn api_error(err: kube::Error) -> (u16, String, String) {
    match err {
        kube::Error::Api(status) => (status.code, status.reason.clone(), status.message.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn kube_client_crud_and_error_classification() {
    let server = server(ServerConfig::default()).await;
    let api = tiers_api(kube_client(&server, ADMIN).await);
    let pp = PostParams::default();

    let created = api
        .create(&pp, &dynamic_tier("baseline", 253))
        .await
        .unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert!(created.metadata.uid.is_some());
    let dup = api
        .create(&pp, &dynamic_tier("baseline", 253))
        .await
        .unwrap_err();
    assert_eq!(api_error(dup).1, "AlreadyExists");

    let mut first = api.get("baseline").await.unwrap();
    first.data["spec"]["description"] = json!("a");
    let stale = created.clone();
    api.replace("baseline", &pp, &first).await.unwrap();
    let mut stale = stale;
    stale.data["spec"]["description"] = json!("b");
    let (code, reason, _) = api_error(api.replace("baseline", &pp, &stale).await.unwrap_err());
    assert_eq!((code, reason.as_str()), (409, "Conflict"));

    let mut unversioned = api.get("baseline").await.unwrap();
    unversioned.metadata.resource_version = None;
    let (code, reason, _) = api_error(
        api.replace("baseline", &pp, &unversioned)
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (422, "Invalid"));

    let (code, reason, _) = api_error(
        api.create(&pp, &dynamic_tier("too-high", 999))
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (422, "Invalid"));

    let patched = api
        .patch(
            "baseline",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"priority": 10}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.data["spec"]["priority"], 10);
    assert_eq!(patched.metadata.generation, Some(3));

    let deleted = api
        .delete("baseline", &DeleteParams::default())
        .await
        .unwrap();
    assert!(deleted.is_left());
    let (code, reason, _) = api_error(api.get("baseline").await.unwrap_err());
    assert_eq!((code, reason.as_str()), (404, "NotFound"));
    assert!(api.get_opt("baseline").await.unwrap().is_none());
    let (code, _, _) = api_error(
        api.delete("baseline", &DeleteParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 404);
}

#[tokio::test]
async fn kube_client_pages_lists() {
    let server = server(ServerConfig::default()).await;
    let api = tiers_api(kube_client(&server, ADMIN).await);
    for i in 0..5 {
        server
            .store()
            .create(tier(&format!("t{i}"), i, None))
            .unwrap();
    }
    let mut names = Vec::new();
    let mut lp = ListParams::default().limit(2);
    loop {
        let page = api.list(&lp).await.unwrap();
        names.extend(page.items.iter().map(ResourceExt::name_any));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => lp = lp.continue_token(&token),
            None => break,
        }
    }
    assert_eq!(names, ["t0", "t1", "t2", "t3", "t4"]);
    assert_eq!(server.requests().count(Verb::List, None), 3);
}

#[tokio::test]
async fn kube_client_sees_admission_denials_with_an_empty_reason() {
    let server = server(
        ServerConfig::default().admission(AdmissionMode::BuiltinAntrea {
            controller_user: CONTROLLER.into(),
        }),
    )
    .await;
    let api = tiers_api(kube_client(&server, ADMIN).await);
    api.create(&PostParams::default(), &dynamic_tier("baseline", 253))
        .await
        .unwrap();
    let (code, reason, message) = api_error(
        api.create(&PostParams::default(), &dynamic_tier("baseline", 253))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 400);
    assert_eq!(reason, "");
    assert_eq!(
        message,
        "admission webhook \"tiervalidator.antrea.io\" denied the request: tier baseline priority 253 overlaps with existing Tier"
    );
}

#[tokio::test]
async fn kube_client_sees_faults() {
    let server = server(ServerConfig::default()).await;
    let api = tiers_api(kube_client(&server, ADMIN).await);
    server.inject(Fault::unavailable(Verb::Get).named("x"));
    let (code, reason, _) = api_error(api.get("x").await.unwrap_err());
    assert_eq!((code, reason.as_str()), (503, "ServiceUnavailable"));
    // kube has no default read timeout: a hung request needs the caller's own.
    server.inject(Fault::hang(Verb::List));
    let hung =
        tokio::time::timeout(Duration::from_millis(200), api.list(&ListParams::default())).await;
    assert!(hung.is_err());
    server.inject(Fault::drop_connection(Verb::Get));
    assert!(!matches!(
        api.get("x").await.unwrap_err(),
        kube::Error::Api(_)
    ));
}

#[tokio::test]
async fn kube_client_retries_a_lost_create_into_already_exists() {
    let server = server(ServerConfig::default()).await;
    let yaml = server.kubeconfig_yaml(ADMIN, "retrying").unwrap();
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
    // kube's default client retries 504 on its own.
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    let api = tiers_api(kube::Client::try_from(config).unwrap());
    server.inject(Fault::lose_response(Verb::Create).named("baseline"));
    let (code, reason, _) = api_error(
        api.create(&PostParams::default(), &dynamic_tier("baseline", 253))
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(server.requests().count(Verb::Create, Some("baseline")), 2);
}

#[tokio::test]
async fn kube_recorder_publishes_events() {
    let server = server(ServerConfig::default()).await;
    let client = kube_client(&server, ADMIN).await;
    let api = tiers_api(client.clone());
    let created = api
        .create(&PostParams::default(), &dynamic_tier("baseline", 253))
        .await
        .unwrap();
    let recorder = Recorder::new(client, Reporter::from("tierd"));
    let reference = created.object_ref(&tier_resource());
    let event = Event {
        type_: EventType::Normal,
        reason: "Created".into(),
        note: Some("created Tier baseline".into()),
        action: "Create".into(),
        secondary: None,
    };
    recorder.publish(&event, &reference).await.unwrap();
    recorder.publish(&event, &reference).await.unwrap();
    let events = server.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["apiVersion"], "events.k8s.io/v1");
    assert_eq!(events[0]["metadata"]["namespace"], "default");
    assert_eq!(events[0]["reason"], "Created");
    assert_eq!(events[0]["regarding"]["name"], "baseline");
    assert_eq!(events[0]["series"]["count"], 2);
}

/// Runs a reflector over Tiers in the background; errors are counted and slowed down a bit
/// (kube's watcher retries as fast as it is polled).
fn reflect(
    client: kube::Client,
) -> (
    Reader<DynamicObject>,
    Arc<AtomicUsize>,
    tokio::task::JoinHandle<()>,
) {
    let writer = Writer::new(tier_resource());
    let reader = writer.as_reader();
    let errors = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&errors);
    let stream = watcher(tiers_api(client), watcher::Config::default()).reflect(writer);
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            if event.is_err() {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });
    (reader, errors, task)
}

fn names(reader: &Reader<DynamicObject>) -> BTreeSet<String> {
    reader.state().iter().map(|o| o.name_any()).collect()
}

async fn wait_until(mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + SHORT;
    while !condition() {
        assert!(Instant::now() < deadline, "condition not met in time");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test]
async fn watcher_relists_after_a_forced_410() {
    let server = server(ServerConfig::default()).await;
    server.store().create(tier("a", 1, None)).unwrap();
    let (reader, errors, task) = reflect(kube_client(&server, ADMIN).await);
    tokio::time::timeout(SHORT, reader.wait_until_ready())
        .await
        .unwrap()
        .unwrap();
    assert!(server.wait_for_watches(1, SHORT).await);
    server.store().create(tier("b", 2, None)).unwrap();
    wait_until(|| names(&reader) == set(&["a", "b"])).await;

    server.clear_log();
    server.expire_next_watch();
    server.drop_watches();
    server.store().create(tier("c", 3, None)).unwrap();
    server.store().delete("a").unwrap();
    assert!(server.wait_for_count(Verb::List, None, 1, SHORT).await);
    wait_until(|| names(&reader) == set(&["b", "c"])).await;
    assert!(
        errors.load(Ordering::SeqCst) >= 1,
        "the 410 surfaces as a watcher error"
    );
    // The expired watch, then a fresh one after the relist.
    assert!(server.wait_for_count(Verb::Watch, None, 2, SHORT).await);
    task.abort();
}

#[tokio::test]
async fn watcher_resumes_after_dropped_watches_without_losing_changes() {
    let server = server(ServerConfig::default()).await;
    for name in ["a", "b"] {
        server.store().create(tier(name, 1, None)).unwrap();
    }
    let (reader, _errors, task) = reflect(kube_client(&server, ADMIN).await);
    tokio::time::timeout(SHORT, reader.wait_until_ready())
        .await
        .unwrap()
        .unwrap();
    assert!(server.wait_for_watches(1, SHORT).await);
    server.clear_log();

    // Keep the watch down while other actors change things.
    let outage = server.inject(Fault::unavailable(Verb::Watch).forever());
    server.drop_watches();
    assert!(server.wait_for_count(Verb::Watch, None, 1, SHORT).await);
    server.store().create(tier("c", 3, None)).unwrap();
    server.store().delete("a").unwrap();
    server
        .store()
        .modify("b", |t| t["spec"]["priority"] = json!(7))
        .unwrap();
    server.remove_fault(outage);

    wait_until(|| names(&reader) == set(&["b", "c"])).await;
    wait_until(|| {
        reader
            .get(&kube::runtime::reflector::ObjectRef::new_with(
                "b",
                tier_resource(),
            ))
            .is_some_and(|b| b.data["spec"]["priority"] == 7)
    })
    .await;
    let log = server.requests();
    assert_eq!(
        log.count(Verb::List, None),
        0,
        "resumed from its resourceVersion, no relist"
    );
    assert!(log.count_code(Verb::Watch, None, 200) >= 1);
    task.abort();
}

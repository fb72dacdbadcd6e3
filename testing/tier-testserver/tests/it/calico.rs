//! Calico's Tier over HTTP and through the real kube client: the CRD installed or not (404,
//! discovery, installed at run time), the schema and its CEL rules, the admission policy on
//! built-in deletes, optimistic concurrency, watches, and faults scoped to the resource.

use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde_json::{Value, json};
use tier_testserver::calico::{self, BUILTIN_TIERS, CalicoApi};
use tier_testserver::{Endpoint, Fault, ServerConfig, Verb};

use crate::common::{ADMIN, Http, SHORT, TIERS, WatchReader, kube_client, server};

const V3: &str = "/apis/projectcalico.org/v3/tiers";

fn tier(name: &str, order: Option<f64>, action: Option<&str>) -> Value {
    calico::tier(CalicoApi::V3, name, order, action)
}

#[tokio::test]
async fn a_crd_not_installed_answers_404_until_installed_at_run_time() {
    let server = server(ServerConfig::default()).await;
    let http = Http::admin(&server);
    for reply in [
        http.get(V3).await,
        http.get(&format!("{V3}/default")).await,
        http.get(&format!("{V3}?watch=true")).await,
        http.post(V3, &tier("mine", Some(1.0), None)).await,
        http.get("/apis/projectcalico.org/v3").await,
    ] {
        assert_eq!(reply.code, 404, "{reply:?}");
        assert_eq!(
            reply.body["message"],
            "the server could not find the requested resource"
        );
    }
    let groups = http.get("/apis").await.body;
    assert!(
        !groups.to_string().contains("projectcalico.org"),
        "{groups}"
    );
    // Antrea's Tier is served all along.
    assert_eq!(http.get(TIERS).await.code, 200);

    let calico = server.store().calico();
    assert!(!calico.installed());
    calico.install();
    let list = http.get(V3).await;
    assert_eq!(list.code, 200);
    assert_eq!(list.body["kind"], "TierList");
    assert_eq!(list.body["apiVersion"], "projectcalico.org/v3");
    assert_eq!(list.body["items"], json!([]));
    let groups = http.get("/apis").await.body;
    assert!(
        groups.to_string().contains("projectcalico.org/v3"),
        "{groups}"
    );
    let resources = http.get("/apis/projectcalico.org/v3").await.body;
    assert_eq!(resources["resources"][0]["name"], "tiers");
    assert_eq!(resources["resources"][0]["namespaced"], false);

    assert_eq!(http.post(V3, &tier("mine", None, None)).await.code, 201);
    calico.uninstall();
    assert_eq!(http.get(V3).await.code, 404);
    calico.install();
    assert_eq!(http.get(V3).await.body["items"], json!([]));
}

#[tokio::test]
async fn writes_follow_calicos_schema_rules_and_admission_policy() {
    let server = server(ServerConfig::default().calico(CalicoApi::V3)).await;
    let http = Http::admin(&server);
    for builtin in BUILTIN_TIERS {
        let created = http.post(V3, &builtin.object(CalicoApi::V3)).await;
        assert_eq!(created.code, 201, "{created:?}");
        assert_eq!(
            created.body["spec"]["defaultAction"],
            builtin.default_action
        );
    }
    // Omitted: the default action is Deny, the order stays omitted; equal orders are fine.
    let mine = http.post(V3, &tier("mine", None, None)).await;
    assert_eq!(mine.body["spec"], json!({"defaultAction": "Deny"}));
    let twin = http
        .post(V3, &tier("twin", Some(1000.0), Some("Pass")))
        .await;
    assert_eq!(
        (twin.code, twin.body["spec"]["order"].clone()),
        (201, json!(1000))
    );

    // A built-in is pinned on create and on update, with Calico's messages.
    server.store().calico().delete("kube-admin").unwrap();
    let wrong = http
        .post(V3, &tier("kube-admin", Some(5.0), Some("Pass")))
        .await;
    assert_eq!(
        (wrong.code, wrong.body["reason"].clone()),
        (422, json!("Invalid"))
    );
    assert_eq!(
        wrong.body["message"],
        "Tier.projectcalico.org \"kube-admin\" is invalid: <nil>: Invalid value: \"object\": \
         kube-admin tier order must be 1000"
    );
    let mut default = http.get(&format!("{V3}/default")).await.body;
    default["spec"]["defaultAction"] = json!("Pass");
    let refused = http.put(&format!("{V3}/default"), &default).await;
    assert_eq!(refused.code, 422, "{refused:?}");
    assert_eq!(
        refused.body["details"]["causes"][0]["message"],
        "Invalid value: \"object\": The 'default' tier must have default action 'Deny'"
    );
    let patched = http
        .merge_patch(&format!("{V3}/default"), &json!({"spec": {"order": 7}}))
        .await;
    assert_eq!(patched.code, 422, "{patched:?}");

    // PUT: a stale resourceVersion conflicts, a missing one is invalid, a fresh one wins.
    let stored = http.get(&format!("{V3}/mine")).await.body;
    let mut fresh = stored.clone();
    fresh["spec"]["order"] = json!(5.5);
    fresh["metadata"]["managedFields"] = json!([{"manager": "tierd", "operation": "Update"}]);
    let updated = http.put(&format!("{V3}/mine"), &fresh).await;
    assert_eq!(updated.code, 200, "{updated:?}");
    assert_eq!(updated.body["spec"]["order"], 5.5);
    assert_eq!(updated.body["metadata"]["generation"], 2);
    assert_eq!(
        updated.body["metadata"]["managedFields"][0]["manager"],
        "tierd"
    );
    let stale = http.put(&format!("{V3}/mine"), &stored).await;
    assert_eq!(
        (stale.code, stale.body["reason"].clone()),
        (409, json!("Conflict"))
    );
    assert_eq!(
        stale.body["message"],
        "Operation cannot be fulfilled on tiers.projectcalico.org \"mine\": the object has been \
         modified; please apply your changes to the latest version and try again"
    );
    let mut unversioned = fresh.clone();
    unversioned["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    assert_eq!(
        http.put(&format!("{V3}/mine"), &unversioned).await.code,
        422
    );

    // Deleting a built-in is refused by the admission policy; a user Tier goes.
    let denied = http.delete(&format!("{V3}/default"), None).await;
    assert_eq!(
        (denied.code, denied.body["reason"].clone()),
        (422, json!("Invalid"))
    );
    assert_eq!(
        denied.body["details"]["causes"][0]["message"],
        "ValidatingAdmissionPolicy 'protect-builtin-tiers.projectcalico.org' with binding \
         'protect-builtin-tiers.projectcalico.org' denied request: The built-in tier default \
         cannot be deleted"
    );
    assert!(server.store().calico().get("default").is_some());
    assert_eq!(http.delete(&format!("{V3}/mine"), None).await.code, 200);
    let missing = http.get(&format!("{V3}/mine")).await;
    assert_eq!(
        missing.body["message"],
        "tiers.projectcalico.org \"mine\" not found"
    );
    // Antrea's Tiers are a separate resource.
    assert_eq!(http.get(TIERS).await.body["items"], json!([]));
}

#[tokio::test]
async fn the_older_crd_group_is_selectable_and_unprotected() {
    const V1: &str = "/apis/crd.projectcalico.org/v1/tiers";
    let server = server(ServerConfig::default().calico(CalicoApi::CrdV1)).await;
    let http = Http::admin(&server);
    assert_eq!(http.get(V3).await.code, 404);
    let body = BUILTIN_TIERS[0].object(CalicoApi::CrdV1);
    assert_eq!(body["apiVersion"], "crd.projectcalico.org/v1");
    assert_eq!(http.post(V1, &body).await.code, 201);
    // A v3 body is refused by the v1 decoder.
    assert_eq!(
        http.post(V1, &BUILTIN_TIERS[1].object(CalicoApi::V3))
            .await
            .code,
        400
    );
    // The admission policy matches projectcalico.org/v3 only.
    assert_eq!(http.delete(&format!("{V1}/default"), None).await.code, 200);
}

#[tokio::test]
async fn faults_and_the_request_log_are_per_resource() {
    let server = server(ServerConfig::default().calico(CalicoApi::V3)).await;
    let http = Http::admin(&server);
    server.store().calico().create_builtins().unwrap();
    server.inject(Fault::forbidden_on(CalicoApi::V3.resource(), Verb::Create, ADMIN).forever());
    let refused = http.post(V3, &tier("mine", None, None)).await;
    assert_eq!(refused.code, 403);
    assert_eq!(
        refused.body["message"],
        "tiers.projectcalico.org is forbidden: User \"admin\" cannot create resource \"tiers\" \
         in API group \"projectcalico.org\" at the cluster scope"
    );
    // Updates stay allowed, and Antrea's creates are not this fault's.
    let default = http.get(&format!("{V3}/default")).await.body;
    let mut labeled = default.clone();
    labeled["metadata"]["labels"] = json!({"owner": "tierd"});
    assert_eq!(http.put(&format!("{V3}/default"), &labeled).await.code, 200);
    let antrea = tier_testserver::tier::tier("mine", 5, None);
    assert_eq!(http.post(TIERS, &antrea).await.code, 201);

    let log = server.requests();
    assert_eq!(
        log.count_at(Endpoint::CalicoTiers, Verb::Create, Some("mine")),
        1
    );
    assert_eq!(log.count_at(Endpoint::CalicoTiers, Verb::Update, None), 1);
    assert_eq!(log.count(Verb::Create, Some("mine")), 1);
}

#[tokio::test]
async fn watches_stream_calico_tiers_with_their_api_version() {
    let server = server(
        ServerConfig::default()
            .calico(CalicoApi::V3)
            .bookmark_interval(Some(std::time::Duration::from_millis(50))),
    )
    .await;
    let http = Http::admin(&server);
    let mut watch = WatchReader::open_at(&http, V3, "allowWatchBookmarks=true").await;
    server.store().calico().create_builtins().unwrap();
    let first = watch.next_change(SHORT).await.unwrap();
    assert_eq!(first["type"], "ADDED");
    assert_eq!(first["object"]["apiVersion"], "projectcalico.org/v3");
    loop {
        let event = watch.next(SHORT).await.unwrap();
        if event["type"] == "BOOKMARK" {
            assert_eq!(event["object"]["apiVersion"], "projectcalico.org/v3");
            break;
        }
    }
    // Uninstalling the CRD deletes the Tiers under the open watch.
    server.store().calico().uninstall();
    let mut deleted = 0;
    while deleted < 3 {
        let event = watch.next_change(SHORT).await.unwrap();
        if event["type"] == "DELETED" {
            deleted += 1;
        }
    }
}

#[tokio::test]
async fn the_kube_client_reads_and_writes_calico_tiers() {
    let server = server(ServerConfig::default().calico(CalicoApi::V3)).await;
    let resource = ApiResource {
        group: "projectcalico.org".into(),
        version: "v3".into(),
        api_version: "projectcalico.org/v3".into(),
        kind: "Tier".into(),
        plural: "tiers".into(),
    };
    let api: Api<DynamicObject> = Api::all_with(kube_client(&server, ADMIN).await, &resource);
    let pp = PostParams::default();
    let body: DynamicObject =
        serde_json::from_value(BUILTIN_TIERS[1].object(CalicoApi::V3)).unwrap();
    let created = api.create(&pp, &body).await.unwrap();
    assert_eq!(created.data["spec"]["order"].as_f64(), Some(1000.0));
    let mut changed = api.get("kube-admin").await.unwrap();
    changed.data["spec"]["order"] = json!(1001.0);
    match api.replace("kube-admin", &pp, &changed).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
        }
        other => panic!("expected 422, got {other:?}"),
    }
    let listed = api.list(&Default::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    match api.delete("kube-admin", &Default::default()).await {
        Err(kube::Error::Api(status)) => assert!(status.message.contains("cannot be deleted")),
        other => panic!("expected a denial, got {other:?}"),
    }
}
